use super::*;
use iced_x86::{Decoder, DecoderOptions};

fn decode(bytes: &[u8], ip: u64) -> Instruction {
    Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE).decode()
}

fn plain(ip: u64, len: u8) -> Retired {
    Retired {
        ip,
        len,
        ..Retired::default()
    }
}

/// `add $1, %eax` style independent ALU ops on rotating registers.
fn alu_stream(model: &mut Model, n: u64) {
    // add ecx,1 / add edx,1 / add esi,1 / add edi,1 (83 c1 01 ...)
    let ops = [
        [0x83, 0xc1, 0x01],
        [0x83, 0xc2, 0x01],
        [0x83, 0xc6, 0x01],
        [0x83, 0xc7, 0x01],
    ];
    for i in 0..n {
        let ip = 0x1000 + (i % 4) * 3;
        model.retire(&plain(ip, 3), &decode(&ops[(i % 4) as usize], ip));
    }
}

#[test]
fn independent_alu_ops_run_at_the_fetch_width() {
    let mut m = Model::new(&Config::default());
    alu_stream(&mut m, 40_000);
    let cpi = m.report().cpi();
    // Each op depends on itself four instructions back: one per register
    // per cycle, four registers, so the fetch width bounds it.
    let bound = 1.0 / f64::from(Config::default().fetch_width);
    assert!((bound - 0.01..bound + 0.02).contains(&cpi), "CPI {cpi}");
}

fn branch(model: &mut Model, ip: u64, taken: bool, kind: BranchKind) {
    let r = Retired {
        ip,
        len: 2,
        kind,
        taken,
        target: ip + 0x40,
        ..Retired::default()
    };
    // `jne +0x3e` (75 3e): its decoding only matters for dependences.
    model.retire(&r, &decode(&[0x75, 0x3e], ip));
}

#[test]
fn unpredictable_branches_cost_the_penalty() {
    let run = |pattern: &dyn Fn(u64) -> bool| {
        let mut m = Model::new(&Config::default());
        let mut x = 0x1234_5678u64;
        for i in 0..20_000 {
            alu_stream(&mut m, 8);
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            branch(
                &mut m,
                0x2000,
                pattern(i) ^ (x & 1 == 1 && pattern(u64::MAX)),
                BranchKind::Conditional,
            );
        }
        m.report()
    };
    let predictable = run(&|i| i % 4 == 0);
    let random = run(&|i| i == u64::MAX);
    let extra = random.cycles as f64 - predictable.cycles as f64;
    let mispredicts = random.mispredictions() as f64 - predictable.mispredictions() as f64;
    assert!(
        random.mpki() > 30.0 && predictable.mpki() < 1.0,
        "{} {}",
        random.mpki(),
        predictable.mpki()
    );
    let per = extra / mispredicts;
    assert!((9.0..14.0).contains(&per), "{per} cycles per misprediction");
}

#[test]
fn brr_is_cheap_when_not_taken_and_never_trains_the_predictor() {
    let cfg = Config::default();
    let base = {
        let mut m = Model::new(&cfg);
        for _ in 0..10_000 {
            alu_stream(&mut m, 8);
        }
        m.report().cycles
    };
    let with_brr = |taken_every: u64| {
        let mut m = Model::new(&cfg);
        for i in 0..10_000 {
            alu_stream(&mut m, 8);
            let r = Retired {
                ip: 0x3000,
                len: 8,
                kind: BranchKind::Other,
                taken: i % taken_every == 0,
                target: 0x3100,
                ..Retired::default()
            };
            m.retire(&r, &decode(&[0x44, 0x0f, 0xb9, 0x05, 0, 1, 0, 0], 0x3000));
        }
        m.report()
    };
    let rare = with_brr(1 << 20);
    let per_site = (rare.cycles - base) as f64 / 10_000.0;
    // About one fetch slot (block alignment shifts by one instruction).
    let slot = 1.0 / f64::from(cfg.fetch_width);
    assert!(
        per_site <= slot * 1.1,
        "{per_site} cycles per not-taken brr"
    );
    assert_eq!(rare.mispredictions(), 0);
    let half = with_brr(2);
    let per_taken = (half.cycles - rare.cycles) as f64 / 5_000.0;
    // The redirect bubble replaces the cycle the fetch block would have
    // taken anyway, so a taken brr adds a little less than the penalty.
    let expect = f64::from(cfg.decode_redirect_penalty);
    assert!(
        (expect - 1.5..=expect + 0.5).contains(&per_taken),
        "{per_taken} cycles per taken brr"
    );
    assert_eq!(
        half.mispredictions(),
        0,
        "taken brr is a redirect, never a misprediction"
    );
}

#[test]
fn a_counter_in_memory_serialises_and_independent_counters_do_not() {
    // decq 0x100(%rip) at the same or at different addresses.
    let ins = decode(&[0x48, 0xff, 0x0d, 0x00, 0x01, 0x00, 0x00], 0x4000);
    let run = |same: bool| {
        let mut m = Model::new(&Config::default());
        for i in 0..10_000u64 {
            let addr = if same { 0x8000 } else { 0x8000 + (i % 512) * 8 };
            let r = Retired {
                ip: 0x4000,
                len: 7,
                mem_addr: addr,
                mem_write: true,
                ..Retired::default()
            };
            m.retire(&r, &ins);
        }
        m.report().cycles as f64 / 10_000.0
    };
    let chain = run(true);
    let spread = run(false);
    assert!(chain >= 4.5, "{chain} cycles per dependent decrement");
    assert!(spread < 1.5, "{spread} cycles per independent decrement");
}

/// Random jcc outcomes, plus an indirect call whose target changes and its
/// return, under the predictor `kind`.
fn random_branches(kind: PredictorKind) -> Report {
    let cfg = Config {
        predictor: kind,
        ..Config::default()
    };
    let mut m = Model::new(&cfg);
    let mut x = 0x2545_f491u64;
    for i in 0..20_000u64 {
        alu_stream(&mut m, 8);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        branch(&mut m, 0x2000, x & 1 == 1, BranchKind::Conditional);
        // call *%rax (ff d0) to one of two targets, then ret (c3).
        let target = 0x5000 + (x >> 1 & 1) * 0x100;
        let call = Retired {
            ip: 0x2100,
            len: 2,
            kind: BranchKind::IndirectCall,
            taken: true,
            target,
            ..Retired::default()
        };
        m.retire(&call, &decode(&[0xff, 0xd0], 0x2100));
        // Every 64th return goes somewhere the RAS does not hold.
        let back = if i % 64 == 0 { 0x7000 } else { 0x2102 };
        let ret = Retired {
            ip: target,
            len: 1,
            kind: BranchKind::Return,
            taken: true,
            target: back,
            ..Retired::default()
        };
        m.retire(&ret, &decode(&[0xc3], target));
    }
    m.report()
}

#[test]
fn the_perfect_predictor_never_mispredicts_and_is_faster() {
    let tournament = random_branches(PredictorKind::Tournament);
    let perfect = random_branches(PredictorKind::Perfect);
    assert_eq!(perfect.predictor, "perfect");
    assert_eq!(perfect.mispredictions(), 0);
    assert_eq!(perfect.mpki(), 0.0);
    assert_eq!(perfect.instructions, tournament.instructions);
    // Half the jcc, about half the indirect calls, every 64th return.
    assert!(tournament.mpki() > 50.0, "{}", tournament.mpki());
    let saved = tournament.cycles as f64 - perfect.cycles as f64;
    let per = saved / tournament.mispredictions() as f64;
    assert!((8.0..14.0).contains(&per), "{per} cycles per misprediction");
    // The other predictors are in between: they do mispredict here.
    for k in [PredictorKind::Gshare, PredictorKind::Bimodal] {
        let r = random_branches(k);
        assert!(r.mpki() > 50.0 && r.cycles > perfect.cycles, "{k:?}");
    }
}

#[test]
fn btb_and_l1i_misses_are_counted() {
    // Direct jumps at `n` addresses 321 bytes apart (one per cache line,
    // spread over the sets), visited round robin: they
    // fit the 1024-entry BTB when few, and thrash it (and the L1I) when
    // they are more than its entries or the cache's lines.
    let run = |n: u64| {
        let mut m = Model::new(&Config::default());
        for _ in 0..4 {
            for j in 0..n {
                let ip = 0x10_0000 + j * 321;
                let r = Retired {
                    ip,
                    len: 2,
                    kind: BranchKind::DirectJump,
                    taken: true,
                    target: ip + 4096,
                    ..Retired::default()
                };
                // jmp +0x7e (eb 7e): only its decoding matters here.
                m.retire(&r, &decode(&[0xeb, 0x7e], ip));
            }
        }
        m.report()
    };
    let few = run(64);
    assert_eq!(few.btb.0, 4 * 64);
    assert_eq!(few.btb.1, 64, "only the first round misses");
    assert_eq!(few.l1i.1, 64);
    let many = run(4096);
    assert_eq!(
        many.btb.1, many.btb.0,
        "4096 targets thrash a 1024-entry BTB"
    );
    assert_eq!(many.l1i.1, many.l1i.0, "4096 lines thrash a 512-line L1I");
    assert!(many.btb_mpki() > 900.0);
    let text = many.to_text();
    assert!(text.contains("BTB: lookups 16384 misses 16384"), "{text}");
    assert!(text.contains("predictor: tournament"), "{text}");
}
