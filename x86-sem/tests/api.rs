//! The owner-facing pieces: the cache, table overrides, the rep limit, the
//! stops that do not come from a memory access, and state comparison.

use iced_x86::{Code, CpuidFeature};
use x86_sem::{
    flag, step, xcr0, Addr32Rep, BitScanZero, BranchKind, Cpu, CpuModel, CpuState, DecodeCache,
    Difference, Insn, Machine, MemError, Memory, Quirks, Retired, Stop, Table, MXCSR_DEFAULT, X87,
};

/// Flat memory: code and data in one executable vector at `BASE`.
#[derive(Debug)]
struct Flat(Vec<u8>);

const BASE: u64 = 0x1000;

impl Flat {
    fn with_code(code: &[u8]) -> Flat {
        let mut v = vec![0u8; 0x1000];
        v[..code.len()].copy_from_slice(code);
        Flat(v)
    }

    fn range(&self, addr: u64, size: usize, write: bool) -> Result<usize, MemError> {
        let off = addr.wrapping_sub(BASE) as usize;
        if addr < BASE || off + size > self.0.len() {
            return Err(MemError::Fault { addr, write });
        }
        Ok(off)
    }
}

impl Memory for Flat {
    fn load(&mut self, addr: u64, size: usize) -> Result<u64, MemError> {
        let o = self.range(addr, size, false)?;
        let mut b = [0u8; 8];
        b[..size].copy_from_slice(&self.0[o..o + size]);
        Ok(u64::from_le_bytes(b))
    }
    fn store(&mut self, addr: u64, size: usize, value: u64) -> Result<(), MemError> {
        let o = self.range(addr, size, true)?;
        self.0[o..o + size].copy_from_slice(&value.to_le_bytes()[..size]);
        Ok(())
    }
    fn fetch(&mut self, addr: u64, buf: &mut [u8; 15]) -> usize {
        let Ok(o) = self.range(addr, 1, false) else {
            return 0;
        };
        let n = (self.0.len() - o).min(15);
        buf[..n].copy_from_slice(&self.0[o..o + n]);
        n
    }
}

type Plain = Cpu<CpuState, Flat>;

fn machine(code: &[u8]) -> Plain {
    let mut regs = CpuState::new();
    regs.rip = BASE;
    regs.gpr[4] = BASE + 0xf00;
    Cpu {
        regs,
        mem: Flat::with_code(code),
    }
}

fn cache() -> DecodeCache<Vec<Insn>> {
    DecodeCache::new(vec![Insn::empty(); 256]).unwrap()
}

#[test]
fn a_run_is_fetched_through_fetch_by_default_and_decoded_to_its_branch() {
    // mov eax, ebx; inc eax; jmp $; then zeros.
    let mut m = Flat::with_code(&[0x89, 0xd8, 0xff, 0xc0, 0xeb, 0xfe]);
    let mut bytes = [0u8; 64];
    // The default reads one fetch's worth, 15 bytes at most.
    assert_eq!(m.fetch_run(BASE, &mut bytes), 15);
    assert_eq!(m.fetch_run(BASE, &mut bytes[..4]), 4);
    assert_eq!(m.fetch_run(0, &mut bytes), 0);
    let got = m.fetch_run(BASE, &mut bytes);
    let mut run = [Insn::empty(); 8];
    assert_eq!(Insn::decode_run(BASE, &bytes[..got], &mut run), 3);
    assert_eq!(run[2].ip(), BASE + 4);
}

#[test]
fn the_cache_needs_a_power_of_two_and_forgets_what_it_is_told() {
    assert!(DecodeCache::new(vec![Insn::empty(); 48]).is_err());
    assert!(DecodeCache::new(Vec::<Insn>::new()).is_err());
    let table = Table::<Plain>::boxed(&CpuModel::every_feature());
    let mut c = cache();
    assert_eq!(c.capacity(), 256);
    // inc eax; inc eax
    let mut m = machine(&[0xff, 0xc0, 0xff, 0xc0]);
    step(&mut m, &table, &mut c).unwrap();
    step(&mut m, &table, &mut c).unwrap();
    assert_eq!(m.regs.gpr[0], 2);
    assert_eq!(c.get(BASE).map(Insn::code), Some(Code::Inc_rm32));
    assert_eq!(c.get(BASE + 2).map(Insn::len), Some(2));
    // The code changes: a flush of its range makes the new bytes visible.
    m.mem.0[0..2].copy_from_slice(&[0xff, 0xc8]); // dec eax
    m.regs.rip = BASE;
    step(&mut m, &table, &mut c).unwrap();
    assert_eq!(m.regs.gpr[0], 3, "the stale decoding ran");
    c.flush_range(BASE + 1, BASE + 2);
    assert!(c.get(BASE).is_none());
    assert!(c.get(BASE + 2).is_some(), "outside the range");
    m.regs.rip = BASE;
    step(&mut m, &table, &mut c).unwrap();
    assert_eq!(m.regs.gpr[0], 2);
    c.flush();
    assert!(c.get(BASE).is_none() && c.get(BASE + 2).is_none());
    // forget_range looks only where an instruction overlapping the range
    // can start: a store to the second byte of the first inc forgets it,
    // not the next one.
    m.regs.rip = BASE;
    step(&mut m, &table, &mut c).unwrap();
    step(&mut m, &table, &mut c).unwrap();
    c.forget_range(BASE + 1, BASE + 2);
    assert!(c.get(BASE).is_none());
    assert!(c.get(BASE + 2).is_some(), "outside the range");
    c.forget_range(BASE + 3, BASE + 4);
    assert!(c.get(BASE + 2).is_none(), "its last byte was written");
}

/// An owner's own instruction: ud1 eax, [rip+rel32] jumps to its address.
fn owner_jump(x: &mut Plain, insn: &Insn, r: &mut Retired) -> Result<(), Stop> {
    let target = insn.rip_relative_address().ok_or(Stop::Trap)?;
    x.regs.gpr[1] += 1;
    r.kind = BranchKind::Other;
    r.taken = true;
    r.target = target;
    r.next_rip = target;
    Ok(())
}

#[test]
fn owners_install_their_own_instructions() {
    // ud1 eax, [rip + 0x10]
    let code = [0x0f, 0xb9, 0x05, 0x10, 0, 0, 0];
    let mut table = Table::<Plain>::boxed(&CpuModel::every_feature());
    let mut m = machine(&code);
    assert_eq!(step(&mut m, &table, &mut cache()), Err(Stop::Trap));
    assert_eq!(m.regs.rip, BASE, "a stop leaves rip");
    table.set(Code::Ud1_r32_rm32, owner_jump);
    assert!(table.implements(Code::Ud1_r32_rm32));
    let r = step(&mut m, &table, &mut cache()).unwrap();
    assert_eq!(
        (r.kind, r.taken, r.target, r.next_rip),
        (BranchKind::Other, true, BASE + 0x17, BASE + 0x17)
    );
    assert_eq!((m.regs.rip, m.regs.gpr[1]), (BASE + 0x17, 1));
}

/// The plain machine with a rep limit.
#[derive(Debug)]
struct Limited(Plain, u64);

impl Machine for Limited {
    type Regs = CpuState;
    type Mem = Flat;
    fn regs(&self) -> &CpuState {
        &self.0.regs
    }
    fn regs_mut(&mut self) -> &mut CpuState {
        &mut self.0.regs
    }
    fn mem(&mut self) -> &mut Flat {
        &mut self.0.mem
    }
    fn rep_limit(&self) -> u64 {
        self.1
    }
}

#[test]
fn a_long_rep_resumes_where_the_limit_stopped_it() {
    // rep stosb
    let mut m = Limited(machine(&[0xf3, 0xaa]), 3);
    m.0.regs.gpr[0] = 0x5a;
    m.0.regs.gpr[1] = 10;
    m.0.regs.gpr[7] = BASE + 0x800;
    let table = Table::<Limited>::boxed(&CpuModel::every_feature());
    let mut c = cache();
    let mut steps = 0;
    loop {
        let r = step(&mut m, &table, &mut c).unwrap();
        steps += 1;
        if r.next_rip != BASE {
            break;
        }
        assert_eq!(m.0.regs.rip, BASE);
        assert_eq!(m.0.regs.gpr[1], 10 - 3 * steps);
    }
    assert_eq!(steps, 4);
    assert_eq!(m.0.regs.gpr[1], 0);
    assert_eq!(m.0.regs.gpr[7], BASE + 0x80a);
    assert!(m.0.mem.0[0x800..0x80a].iter().all(|&b| b == 0x5a));
    assert_eq!(m.0.mem.0[0x80a], 0);
}

#[test]
fn stops_that_are_not_memory_faults() {
    let table = Table::<Plain>::boxed(&CpuModel::every_feature());
    // fldpi: not implemented.
    let mut m = machine(&[0xd9, 0xeb]);
    assert_eq!(
        step(&mut m, &table, &mut cache()),
        Err(Stop::Unsupported {
            ip: BASE,
            code: Code::Fldpi
        })
    );
    // Outside the executable memory, and a truncated instruction.
    let mut m = machine(&[]);
    m.regs.rip = 0x10;
    assert_eq!(step(&mut m, &table, &mut cache()), Err(Stop::BadFetch));
    m.regs.rip = BASE + 0xfff;
    m.mem.0[0xfff] = 0x48; // a lone REX.W
    assert_eq!(step(&mut m, &table, &mut cache()), Err(Stop::BadFetch));
    // syscall and cpuid go back to the owner, rip unmoved.
    for code in [&[0x0f, 0x05][..], &[0x0f, 0xa2]] {
        let mut m = machine(code);
        let want = if code[1] == 0x05 {
            Stop::Syscall
        } else {
            Stop::Opaque
        };
        assert_eq!(step(&mut m, &table, &mut cache()), Err(want));
        assert_eq!(m.regs, machine(code).regs);
    }
    // div ecx by zero.
    let mut m = machine(&[0xf7, 0xf1]);
    assert_eq!(step(&mut m, &table, &mut cache()), Err(Stop::DivideError));
}

#[test]
fn an_unknown_flag_stops_a_condition_until_something_defines_it() {
    // shl eax, 5; jo +0; cmp eax, eax; jo +0
    let code = [0xc1, 0xe0, 0x05, 0x70, 0x00, 0x39, 0xc0, 0x70, 0x00];
    let table = Table::<Plain>::boxed(&CpuModel::every_feature());
    let mut c = cache();
    let mut m = machine(&code);
    m.regs.gpr[0] = 0x4000_0001;
    step(&mut m, &table, &mut c).unwrap();
    assert_eq!(m.regs.undefined, flag::OF | flag::AF);
    let before = m.regs;
    assert_eq!(step(&mut m, &table, &mut c), Err(Stop::UnknownFlags));
    assert_eq!(m.regs, before);
    // The owner decides to skip it; cmp defines every flag again.
    m.regs.rip += 2;
    step(&mut m, &table, &mut c).unwrap();
    assert_eq!(m.regs.undefined, 0);
    assert_eq!(
        step(&mut m, &table, &mut c).map(|r| r.kind),
        Ok(BranchKind::Conditional)
    );
}

#[test]
fn a_prediction_is_compared_without_its_unknown_flags() {
    let mut predicted = CpuState::new();
    predicted.gpr[3] = 7;
    predicted.rflags |= flag::ZF | flag::OF;
    predicted.undefined = flag::OF;
    let mut actual = predicted;
    actual.rflags &= !flag::OF;
    actual.rflags |= flag::RF;
    assert_eq!(predicted.first_difference(&actual), None);
    actual.rflags &= !flag::ZF;
    assert_eq!(
        predicted.first_difference(&actual),
        Some(Difference::Flags(flag::ZF))
    );
    actual = predicted;
    actual.gpr[3] = 8;
    assert_eq!(
        predicted.first_difference(&actual),
        Some(Difference::Gpr(3))
    );
    actual = predicted;
    actual.vec[17][5] = 1;
    assert_eq!(
        predicted.first_difference(&actual),
        Some(Difference::Vec(17))
    );
}

#[test]
fn floating_point_waits_for_the_owner_to_fill_its_state() {
    let table = Table::<Plain>::boxed(&CpuModel::every_feature());
    // addsd xmm0, xmm1; fld1
    for code in [&[0xf2, 0x0f, 0x58, 0xc1][..], &[0xd9, 0xe8][..]] {
        let mut x = machine(code);
        let before = x.regs;
        assert_eq!(step(&mut x, &table, &mut cache()), Err(Stop::Opaque));
        assert_eq!(x.regs, before);
        x.regs.mxcsr = MXCSR_DEFAULT;
        x.regs.x87 = X87::INIT;
        let r = step(&mut x, &table, &mut cache()).expect("runs once filled");
        assert_eq!(r.next_rip, BASE + code.len() as u64);
    }
}

#[test]
fn a_prediction_compares_the_float_state_but_not_its_unknown_condition_codes() {
    let mut predicted = CpuState::new();
    predicted.mxcsr = MXCSR_DEFAULT;
    predicted.x87 = X87::INIT;
    predicted.x87.fsw = 0x3800;
    predicted.x87.ftw = 0x80;
    predicted.x87.st[0].mantissa = 1 << 63;
    predicted.x87.st[0].sign_exponent = 0x3fff;
    predicted.x87.undefined = 0x4500;
    let mut actual = predicted;
    actual.x87.undefined = 0;
    actual.x87.fsw |= 0x4100;
    assert_eq!(predicted.first_difference(&actual), None);
    actual.x87.fsw |= 0x200;
    assert_eq!(
        predicted.first_difference(&actual),
        Some(Difference::X87Control)
    );
    actual = predicted;
    actual.mxcsr |= 0x20;
    assert_eq!(predicted.first_difference(&actual), Some(Difference::Mxcsr));
    actual = predicted;
    actual.x87.st[0].mantissa += 1;
    assert_eq!(
        predicted.first_difference(&actual),
        Some(Difference::X87Register(0))
    );
    actual = predicted;
    actual.x87.ftw = 0xc0;
    assert_eq!(
        predicted.first_difference(&actual),
        Some(Difference::X87Register(7))
    );
}

fn quirks(addr32_rep: Addr32Rep, bit_scan_zero: BitScanZero) -> CpuModel {
    CpuModel::every_feature().with_quirks(Quirks {
        addr32_rep,
        bit_scan_zero,
    })
}

#[test]
fn a_table_runs_only_the_forms_its_model_has() {
    let base = Table::<Plain>::boxed(&CpuModel::baseline());
    let all = Table::<Plain>::boxed(&CpuModel::every_feature());
    let no512 =
        Table::<Plain>::boxed(&CpuModel::every_feature().with_xcr0(xcr0::X87 | xcr0::AVX_STATE));
    // vmovdqu ymm0, ymm1; vpaddb xmm0{k1}, xmm1, xmm2; shlx rax, rcx, rdx
    let ymm = [0xc5, 0xfe, 0x6f, 0xc1];
    let evex = [0x62, 0xf1, 0x75, 0x09, 0xfc, 0xc2];
    let shlx = [0xc4, 0xe2, 0xe9, 0xf7, 0xc1];
    for (code, bytes, table, runs) in [
        (Code::VEX_Vmovdqu_ymm_ymmm256, &ymm[..], &base, false),
        (Code::VEX_Vmovdqu_ymm_ymmm256, &ymm[..], &all, true),
        (Code::VEX_Vmovdqu_ymm_ymmm256, &ymm[..], &no512, true),
        (
            Code::EVEX_Vpaddb_xmm_k1z_xmm_xmmm128,
            &evex[..],
            &no512,
            false,
        ),
        (Code::EVEX_Vpaddb_xmm_k1z_xmm_xmmm128, &evex[..], &all, true),
        (Code::VEX_Shlx_r64_rm64_r64, &shlx[..], &base, false),
        (Code::VEX_Shlx_r64_rm64_r64, &shlx[..], &no512, true),
    ] {
        let mut m = machine(bytes);
        m.regs.vec[1] = [1, 2, 3, 4, 5, 6, 7, 8];
        let before = m.regs;
        let r = step(&mut m, table, &mut cache());
        assert_eq!(table.implements(code), runs, "{code:?}");
        if runs {
            assert!(r.is_ok(), "{code:?}: {r:?}");
        } else {
            assert_eq!(r, Err(Stop::Unsupported { ip: BASE, code }));
            assert_eq!(m.regs, before, "{code:?}: a refused form changes nothing");
        }
    }
}

#[test]
fn tzcnt_without_bmi1_is_bsf() {
    // tzcnt eax, ecx
    let code = [0xf3, 0x0f, 0xbc, 0xc1];
    let run = |model: &CpuModel, ecx: u64| {
        let table = Table::<Plain>::boxed(model);
        let mut m = machine(&code);
        m.regs.gpr[0] = 0x1234_5678_9abc_def0;
        m.regs.gpr[1] = ecx;
        let r = step(&mut m, &table, &mut cache());
        (
            r.map(|_| ()),
            m.regs.gpr[0],
            m.regs.rflags & (flag::CF | flag::ZF),
        )
    };
    let bmi = quirks(Addr32Rep::ZeroUpper, BitScanZero::KeepsDestination);
    let old = bmi.without_feature(CpuidFeature::BMI1);
    assert_eq!(run(&bmi, 8), (Ok(()), 3, 0));
    assert_eq!(run(&bmi, 0), (Ok(()), 32, flag::CF));
    assert_eq!(run(&old, 8), (Ok(()), 3, 0));
    assert_eq!(run(&old, 0), (Ok(()), 0x1234_5678_9abc_def0, flag::ZF));
    let unknown = old.with_quirks(Quirks::REFUSE);
    assert_eq!(run(&unknown, 0).0, Err(Stop::Opaque));
    assert_eq!(run(&unknown, 8), (Ok(()), 3, 0));
}

#[test]
fn addr32_rep_follows_the_model() {
    // addr32 rep stosb
    let code = [0x67, 0xf3, 0xaa];
    let run = |model: &CpuModel, rcx: u64, rdi: u64| {
        let table = Table::<Plain>::boxed(model);
        let mut m = machine(&code);
        m.regs.gpr[1] = rcx;
        m.regs.gpr[7] = rdi;
        let r = step(&mut m, &table, &mut cache());
        (r.map(|_| ()), m.regs.gpr[1], m.regs.gpr[7])
    };
    let keeps = BitScanZero::KeepsDestination;
    let high = 0x1_0000_0000;
    assert_eq!(
        run(
            &quirks(Addr32Rep::ZeroUpper, keeps),
            high | 1,
            high | 0x1800
        ),
        (Ok(()), 0, 0x1801)
    );
    assert_eq!(
        run(
            &quirks(Addr32Rep::KeepCountUpper, keeps),
            high | 1,
            high | 0x1800
        ),
        (Ok(()), high, 0x1801)
    );
    assert_eq!(
        run(&quirks(Addr32Rep::KeepCountUpper, keeps), high, 0x1800),
        (Ok(()), high, 0x1800)
    );
    let refuse = quirks(Addr32Rep::Refuse, keeps);
    assert_eq!(
        run(&refuse, high | 1, 0x1800),
        (Err(Stop::Opaque), high | 1, 0x1800)
    );
    assert_eq!(run(&refuse, 1, high | 0x1800).0, Err(Stop::Opaque));
    // With the upper halves zero, every CPU agrees.
    assert_eq!(run(&refuse, 1, 0x1800), (Ok(()), 0, 0x1801));
}

#[test]
fn the_host_model_is_measured_from_this_cpu() {
    let host = CpuModel::host();
    eprintln!("{host}");
    assert_eq!(host.name(), "host");
    assert!(host.enables(xcr0::X87 | xcr0::SSE));
    let avx2 = std::arch::is_x86_feature_detected!("avx2");
    let avx512 = std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vl");
    assert_eq!(host.supports(Code::VEX_Vpcmpeqb_ymm_ymm_ymmm256), avx2);
    assert_eq!(host.supports(Code::EVEX_Vpcmpeqb_kr_k1_ymm_ymmm256), avx512);
    assert_eq!(
        host.supports(Code::Tzcnt_r32_rm32),
        std::arch::is_x86_feature_detected!("bmi1")
    );
    let table = Table::<Plain>::boxed(&host);
    assert_eq!(table.model(), &host);
    assert!(table.implements(Code::Tzcnt_r32_rm32), "as tzcnt or as bsf");
}
