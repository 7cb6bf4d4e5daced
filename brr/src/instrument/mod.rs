//! Edge-profiling instrumentation of compiler assembly (`gcc -S`, `clang -S`)
//! at every conditional branch, in the variants the paper compares:
//!
//! - `none`: the program unchanged, plus a marker symbol at every site so
//!   tools can map branch addresses back to sites;
//! - `full`: every execution of both edges of every jcc is counted;
//! - `counter`: counter-based sampling (the paper's Figures 1 and 4): one
//!   global countdown, checked in line at every site (`decq; je`), which on
//!   reaching zero is reset to the interval and records the edge taken;
//! - `brr`: the check is one `brr FREQ, stub` (Figure 8); the recording code
//!   is out of line and reached one time in `interval` on average.
//!
//! A site is one jcc; its edges are `taken` (counter 2i) and `fall-through`
//! (counter 2i+1). The sampled variants record the edge by re-executing the
//! branch in the out-of-line stub. The counter check clobbers the status
//! flags, so it goes before the instruction that sets the jcc's flags (a
//! `cmp`/`test`/ALU op with only moves in between), or, when there is none,
//! it saves the flags with `pushfq` below the red zone. brr does not touch the
//! flags and sits right before the jcc. Counter increments save the flags only
//! where a scan of the following code finds them live.
//!
//! The counters of each translation unit are registered in the `brr_units`
//! section; `runtime/edge_rt.c` writes them all at exit.

pub mod asm;
pub mod layout;

use crate::encoding::ASM_MACRO;
use asm::{flag_use, is_jcc, parse_line, FlagUse, Line};
use std::collections::HashMap;
use std::fmt::Write as _;

/// Which instrumentation to add.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    None,
    Full,
    /// Global countdown sampling with the given interval.
    Counter {
        interval: u32,
    },
    /// branch-on-random sampling with the given interval (a power of two).
    Brr {
        interval: u32,
    },
    /// Ephemeral instrumentation (Traub, Schechter and Smith): every jcc is
    /// emitted in its 6-byte rel32 form so that the runtime
    /// (`runtime/eph_rt.c`) can overwrite it with a 5-byte `jmp` to a
    /// per-site stub (hooking). The stub re-executes the branch, counts the
    /// edge, and after `$BRR_EPH_P` executions writes the original bytes
    /// back (unhooking); a timer signal re-hooks every unhooked site.
    Ephemeral,
}

impl Variant {
    /// Parses `none`, `full`, `counter`, `brr` with an interval for the last two.
    pub fn parse(name: &str, interval: Option<u32>) -> Result<Variant, String> {
        let need = |v: Option<u32>| {
            let i =
                v.ok_or_else(|| format!("variant '{name}' needs an interval (2, 4, … 65536)"))?;
            if !(2..=65536).contains(&i) || !i.is_power_of_two() {
                return Err(format!("interval {i} is not a power of two in 2..=65536"));
            }
            Ok(i)
        };
        match name {
            "none" => Ok(Variant::None),
            "full" => Ok(Variant::Full),
            "counter" => Ok(Variant::Counter {
                interval: need(interval)?,
            }),
            "brr" => Ok(Variant::Brr {
                interval: need(interval)?,
            }),
            "ephemeral" => Ok(Variant::Ephemeral),
            _ => Err(format!(
                "unknown variant '{name}' (none, full, counter, brr, ephemeral)"
            )),
        }
    }

    /// Short name used in file names and tables.
    pub fn label(self) -> String {
        match self {
            Variant::None => "none".into(),
            Variant::Full => "full".into(),
            Variant::Counter { interval } => format!("counter-{interval}"),
            Variant::Brr { interval } => format!("brr-{interval}"),
            Variant::Ephemeral => "ephemeral".into(),
        }
    }
}

/// brr frequency giving a mean interval of `interval` (2^(freq+1)).
pub fn brr_freq(interval: u32) -> u8 {
    (interval.trailing_zeros() - 1) as u8
}

/// One instrumented conditional branch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    pub index: usize,
    pub function: String,
    /// 1-based line of the jcc in the input.
    pub line: usize,
    pub condition: String,
    pub target: String,
    /// Flags had to be saved around the in-line counter check.
    pub saved_flags: bool,
}

/// The rewritten assembly and the sites it instruments.
#[derive(Clone, Debug)]
pub struct Rewritten {
    pub text: String,
    pub sites: Vec<Site>,
}

/// C source of the runtime that writes the counts at exit.
pub const RUNTIME_C: &str = include_str!("../../runtime/edge_rt.c");

/// C source of the ephemeral variant's runtime: hooking, the epoch timer
/// and re-hooking.
pub const EPHEMERAL_RUNTIME_C: &str = include_str!("../../runtime/eph_rt.c");

/// Second opcode byte of the rel32 form (`0F 8x`) of the jcc with
/// condition `cc`.
pub fn jcc_rel32_opcode(cc: &str) -> Option<u8> {
    let n = match cc {
        "o" => 0,
        "no" => 1,
        "b" | "c" | "nae" => 2,
        "nb" | "nc" | "ae" => 3,
        "e" | "z" => 4,
        "ne" | "nz" => 5,
        "be" | "na" => 6,
        "nbe" | "a" => 7,
        "s" => 8,
        "ns" => 9,
        "p" | "pe" => 10,
        "np" | "po" => 11,
        "l" | "nge" => 12,
        "nl" | "ge" => 13,
        "le" | "ng" => 14,
        "nle" | "g" => 15,
        _ => return None,
    };
    Some(0x80 | n)
}

/// Bytes of one ephemeral site record in the `brr_eph` section: site
/// address, stub address, executions left before unhooking, the original
/// bytes, hooked flag, spare.
pub const EPH_RECORD: usize = 48;

/// C source of the SIGILL handler that runs brr natively, with the LFSR
/// parameters of [`crate::lfsr`] filled in.
pub fn sigill_runtime_c() -> String {
    use crate::lfsr::{DEFAULT_SEED, FEEDBACK, FREQ_MASKS};
    let masks: Vec<String> = FREQ_MASKS.iter().map(|m| format!("{m:#x}ull")).collect();
    include_str!("../../runtime/brr_sigill.c")
        .replace("@MASKS@", &masks.join(", "))
        .replace("@FEEDBACK@", &format!("{FEEDBACK:#x}ull"))
        .replace("@DEFAULT_SEED@", &format!("{DEFAULT_SEED:#x}ull"))
}

/// Symbol of the marker placed at site `i` of `unit`.
pub fn site_symbol(unit: &str, i: usize) -> String {
    format!("__brr_site_{}_{i}", sanitize(unit))
}

pub(crate) fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Saves the status flags below the red zone (leaf functions keep data in
/// the 128 bytes under %rsp).
const SAVE_FLAGS: &str = "\tleaq\t-128(%rsp), %rsp\n\tpushfq\n";
const RESTORE_FLAGS: &str = "\tpopfq\n\tleaq\t128(%rsp), %rsp\n";

/// Instruments every jcc in `input` (one translation unit named `unit`).
pub fn rewrite(input: &str, unit: &str, variant: Variant) -> Rewritten {
    let raw: Vec<&str> = input.lines().collect();
    let lines: Vec<Line> = raw.iter().map(|l| parse_line(l)).collect();
    let labels: HashMap<&str, usize> = lines
        .iter()
        .enumerate()
        .filter_map(|(i, l)| match l {
            Line::Label(n) => Some((n.as_str(), i)),
            _ => None,
        })
        .collect();
    let label_at = |name: &str| labels.get(name).copied();
    let u = sanitize(unit);
    let counts = format!("__brr_counts_{u}");
    let mut out = String::with_capacity(input.len() * 2);
    let mut stubs = String::new();
    let mut eph_records = String::new();
    let mut sites = Vec::new();
    // Line index → text to insert before it (counter checks placed before
    // the flag-setting instruction).
    let mut before: HashMap<usize, String> = HashMap::new();
    let mut function = String::new();
    let mut plan = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if let Line::Label(name) = line {
            if !name.starts_with(".L") {
                function = name.clone();
            }
        }
        if let Some((cc, target)) = is_jcc(line) {
            plan.push((i, cc.to_string(), target.to_string(), function.clone()));
        }
    }
    for (index, (i, cc, target, func)) in plan.iter().enumerate() {
        let taken_ctr = format!("{counts}+{}(%rip)", 16 * index);
        let fall_ctr = format!("{counts}+{}(%rip)", 16 * index + 8);
        let live_fall = asm::flags_live(&lines, i + 1, &label_at);
        let live_taken = label_at(target).is_none_or(|t| asm::flags_live(&lines, t + 1, &label_at));
        let incr = |ctr: &str, live: bool| {
            if live {
                format!("{SAVE_FLAGS}\tincq\t{ctr}\n{RESTORE_FLAGS}")
            } else {
                format!("\tincq\t{ctr}\n")
            }
        };
        let stub = format!(".Lbrr_s_{u}_{index}");
        let taken_rec = format!(".Lbrr_t_{u}_{index}");
        let after = format!(".Lbrr_a_{u}_{index}");
        // Re-executes the branch in a stub and records the edge it takes.
        let record = |prefix: &str| {
            format!(
                "{prefix}\tj{cc}\t{taken_rec}\n{}\tjmp\t{after}\n{taken_rec}:\n{}\tjmp\t{target}\n",
                incr(&fall_ctr, live_fall),
                incr(&taken_ctr, live_taken)
            )
        };
        let mut saved_flags = false;
        match variant {
            Variant::None => {}
            Variant::Full => {
                let _ = write!(
                    stubs,
                    "{taken_rec}:\n{}\tjmp\t{target}\n",
                    incr(&taken_ctr, live_taken)
                );
            }
            Variant::Brr { .. } => {
                let _ = write!(stubs, "{stub}:\n{}", record(""));
            }
            Variant::Ephemeral => {
                // Entered by the hook's jmp with the flags of the jcc intact.
                let rec = format!(".Lbrr_e_{u}_{index}");
                let site = site_symbol(unit, index);
                let unhook = |tag: &str, back: &str| {
                    format!(
                        ".Lbrr_uh{tag}_{u}_{index}:\n\tleaq\t-128(%rsp), %rsp\n\tpushq\t%rax\n\tpushq\t%rcx\n\
                         \tmovq\t{rec}+24(%rip), %rax\n\tleaq\t{site}(%rip), %rcx\n\tmovl\t%eax, (%rcx)\n\
                         \tshrq\t$32, %rax\n\tmovw\t%ax, 4(%rcx)\n\tmovq\t$0, {rec}+32(%rip)\n\
                         \tincq\t__brr_eph_unhooks(%rip)\n\tpopq\t%rcx\n\tpopq\t%rax\n\tleaq\t128(%rsp), %rsp\n\tjmp\t{back}\n"
                    )
                };
                let count = |ctr: &str, live: bool, tag: &str, exit: &str| {
                    let (save, restore) = if live {
                        (SAVE_FLAGS, RESTORE_FLAGS)
                    } else {
                        ("", "")
                    };
                    let back = format!(".Lbrr_rb{tag}_{u}_{index}");
                    format!(
                        "{save}\tincq\t{ctr}\n\tdecq\t{rec}+16(%rip)\n\tje\t.Lbrr_uh{tag}_{u}_{index}\n\
                         {back}:\n{restore}\tjmp\t{exit}\n{}",
                        unhook(tag, &back)
                    )
                };
                let _ = write!(
                    stubs,
                    "{stub}:\n\tj{cc}\t{taken_rec}\n{}{taken_rec}:\n{}",
                    count(&fall_ctr, live_fall, "f", &after),
                    count(&taken_ctr, live_taken, "t", target)
                );
                let _ = write!(
                    eph_records,
                    "{rec}:\n\t.quad\t{site}\n\t.quad\t{stub}\n\t.quad\t0\n\t.quad\t0\n\t.quad\t0\n\t.quad\t0\n"
                );
            }
            Variant::Counter { interval } => {
                let check = format!("\tdecq\t__brr_countdown(%rip)\n\tje\t{stub}\n");
                let reset = format!("\tmovq\t${interval}, __brr_countdown(%rip)\n");
                match flag_setter(&lines, *i) {
                    Some(w) => {
                        // Duplicate the setter..jcc run in the stub.
                        let dup: String = raw[w..*i].iter().map(|l| format!("{l}\n")).collect();
                        before.entry(w).or_default().push_str(&check);
                        let _ = write!(stubs, "{stub}:\n{}", record(&format!("{reset}{dup}")));
                    }
                    None => {
                        saved_flags = true;
                        let inline = format!("{SAVE_FLAGS}{check}{RESTORE_FLAGS}");
                        before.entry(*i).or_default().push_str(&inline);
                        // The stub is entered with the flags still saved:
                        // restore them before re-executing the branch.
                        let entry = format!("{reset}{RESTORE_FLAGS}");
                        let _ = write!(stubs, "{stub}:\n{}", record(&entry));
                    }
                }
            }
        }
        sites.push(Site {
            index,
            function: func.clone(),
            line: i + 1,
            condition: cc.clone(),
            target: target.clone(),
            saved_flags,
        });
    }
    let site_at: HashMap<usize, usize> = plan.iter().enumerate().map(|(k, p)| (p.0, k)).collect();
    out.push_str(ASM_MACRO);
    out.push('\n');
    for (i, raw_line) in raw.iter().enumerate() {
        if let Some(text) = before.get(&i) {
            out.push_str(text);
        }
        match site_at.get(&i) {
            Some(&k) => {
                let cc = &plan[k].1;
                let _ = writeln!(out, "{}:", site_symbol(unit, k));
                match variant {
                    Variant::None | Variant::Counter { .. } => {
                        let _ = writeln!(out, "{raw_line}");
                        if matches!(variant, Variant::Counter { .. }) {
                            let _ = writeln!(out, ".Lbrr_a_{u}_{k}:");
                        }
                    }
                    Variant::Full => {
                        let live_fall = asm::flags_live(&lines, i + 1, &label_at);
                        let fall_ctr = format!("{counts}+{}(%rip)", 16 * k + 8);
                        let _ = writeln!(out, "\tj{cc}\t.Lbrr_t_{u}_{k}");
                        if live_fall {
                            let _ = write!(out, "{SAVE_FLAGS}\tincq\t{fall_ctr}\n{RESTORE_FLAGS}");
                        } else {
                            let _ = writeln!(out, "\tincq\t{fall_ctr}");
                        }
                    }
                    Variant::Brr { interval } => {
                        let _ = writeln!(out, "\tbrr\t{}, .Lbrr_s_{u}_{k}", brr_freq(interval));
                        let _ = writeln!(out, "{raw_line}");
                        let _ = writeln!(out, ".Lbrr_a_{u}_{k}:");
                    }
                    Variant::Ephemeral => {
                        // The rel32 form, whatever the assembler would pick,
                        // so that the hook's 5-byte jmp fits in it.
                        let op =
                            jcc_rel32_opcode(cc).expect("is_jcc accepts only known conditions");
                        let _ = writeln!(
                            out,
                            "\t.byte\t0x0f, {op:#04x}\n\t.long\t{} - . - 4\n.Lbrr_a_{u}_{k}:",
                            plan[k].2
                        );
                    }
                }
            }
            None => {
                let _ = writeln!(out, "{raw_line}");
            }
        }
    }
    // Counters, unit descriptor and stubs.
    let n = sites.len();
    let _ = write!(
        out,
        "\n\t.section\t.text.brr_stubs,\"ax\",@progbits\n{stubs}\
         \t.local\t{counts}\n\t.comm\t{counts},{},16\n\
         \t.section\t.rodata.brr\n__brr_name_{u}:\n\t.string\t\"{unit}\"\n\
         \t.section\tbrr_units,\"aw\",@progbits\n\t.p2align\t3\n\t.quad\t{counts}\n\t.quad\t{n}\n\t.quad\t__brr_name_{u}\n",
        16 * n.max(1)
    );
    if variant == Variant::Ephemeral {
        let _ = write!(
            out,
            "\t.section\tbrr_eph,\"aw\",@progbits\n\t.p2align\t3\n{eph_records}"
        );
    }
    Rewritten { text: out, sites }
}

/// Line index of the instruction that sets the flags the jcc at `jcc` reads,
/// when only moves and loads of addresses lie between them and no label
/// (another entry) does.
fn flag_setter(lines: &[Line], jcc: usize) -> Option<usize> {
    let mut i = jcc;
    while i > 0 {
        i -= 1;
        match &lines[i] {
            Line::Instr { mnemonic, operands } => match flag_use(mnemonic, operands) {
                FlagUse::Kills => return Some(i),
                FlagUse::Neutral if mnemonic.starts_with("mov") || mnemonic.starts_with("lea") => {}
                _ => return None,
            },
            Line::Label(_) => return None,
            Line::Directive(d) if d.starts_with(".cfi") || d.starts_with(".loc") => return None,
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\t.text\nf:\n\tmovl\t(%rdi), %eax\n\tcmpl\t$3, %eax\n\tmovl\t$1, %edx\n\tjg\t.L2\n\tmovl\t$2, %edx\n.L2:\n\tmovl\t%edx, %eax\n\tret\n";

    #[test]
    fn every_variant_keeps_the_program_and_adds_one_site() {
        for v in [
            Variant::None,
            Variant::Full,
            Variant::Counter { interval: 64 },
            Variant::Brr { interval: 64 },
            Variant::Ephemeral,
        ] {
            let r = rewrite(SAMPLE, "t.s", v);
            assert_eq!(r.sites.len(), 1, "{v:?}");
            assert_eq!(r.sites[0].function, "f");
            assert_eq!(r.sites[0].target, ".L2");
            assert!(r.text.contains("__brr_site_t_s_0:"), "{v:?}");
            assert!(r.text.contains("\t.quad\t1\n"), "{v:?}");
        }
    }

    #[test]
    fn counter_check_goes_before_the_compare() {
        let r = rewrite(SAMPLE, "t.s", Variant::Counter { interval: 8 });
        let check = r.text.find("decq\t__brr_countdown").unwrap();
        let cmp = r.text.find("cmpl\t$3, %eax").unwrap();
        assert!(check < cmp);
        assert!(!r.sites[0].saved_flags);
        // The stub resets the countdown and repeats cmp, mov, jg.
        let stub = &r.text[r.text.find(".Lbrr_s_t_s_0:").unwrap()..];
        assert!(stub.contains("movq\t$8, __brr_countdown(%rip)"));
        assert!(stub.contains("cmpl\t$3, %eax") && stub.contains("jg\t.Lbrr_t_t_s_0"));
    }

    #[test]
    fn brr_sits_before_the_jcc_with_the_right_frequency() {
        let r = rewrite(SAMPLE, "t.s", Variant::Brr { interval: 1024 });
        assert!(r.text.contains("\tbrr\t9, .Lbrr_s_t_s_0\n\tjg\t.L2\n"));
        assert_eq!(brr_freq(2), 0);
        assert_eq!(brr_freq(65536), 15);
    }

    #[test]
    fn ephemeral_sites_are_rel32_jcc_with_a_record_and_a_stub() {
        let r = rewrite(SAMPLE, "t.s", Variant::Ephemeral);
        // jg is 0F 8F rel32.
        assert!(r
            .text
            .contains("__brr_site_t_s_0:\n\t.byte\t0x0f, 0x8f\n\t.long\t.L2 - . - 4\n"));
        assert!(r
            .text
            .contains(".Lbrr_e_t_s_0:\n\t.quad\t__brr_site_t_s_0\n"));
        let stub = &r.text[r.text.find(".Lbrr_s_t_s_0:").unwrap()..];
        assert!(stub.contains("decq\t.Lbrr_e_t_s_0+16(%rip)"));
        assert!(stub.contains("movw\t%ax, 4(%rcx)"));
        assert_eq!(jcc_rel32_opcode("e"), Some(0x84));
        assert_eq!(jcc_rel32_opcode("nle"), Some(0x8f));
    }

    #[test]
    fn intervals_are_checked() {
        assert!(Variant::parse("counter", None).is_err());
        assert!(Variant::parse("brr", Some(3)).is_err());
        assert!(Variant::parse("brr", Some(1 << 17)).is_err());
        assert!(Variant::parse("sometimes", None).is_err());
        assert_eq!(
            Variant::parse("brr", Some(2)),
            Ok(Variant::Brr { interval: 2 })
        );
    }
}
