//! Just enough understanding of compiler-generated AT&T assembly to find the
//! conditional branches and to know whether the status flags are live.

/// One source line, classified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    /// `name:` (possibly followed by a comment).
    Label(String),
    /// An assembler directive (`.p2align`, `.section`, `.cfi_*`, …).
    Directive(String),
    /// An instruction: mnemonic and operand text (comments stripped).
    Instr { mnemonic: String, operands: String },
    /// Blank or comment-only.
    Other,
}

/// Classifies one line of gcc or clang `-S` output.
pub fn parse_line(raw: &str) -> Line {
    let code = strip_comment(raw).trim();
    if code.is_empty() {
        return Line::Other;
    }
    if let Some(name) = code.strip_suffix(':') {
        if !name.contains(char::is_whitespace) {
            return Line::Label(name.to_string());
        }
    }
    if code.starts_with('.') {
        return Line::Directive(code.to_string());
    }
    let mut parts = code.splitn(2, char::is_whitespace);
    let mnemonic = parts.next().unwrap_or("").to_string();
    let operands = parts.next().unwrap_or("").trim().to_string();
    Line::Instr { mnemonic, operands }
}

/// Removes a `#` comment that is not inside a string literal.
fn strip_comment(raw: &str) -> &str {
    let mut in_str = false;
    let mut prev = ' ';
    for (i, c) in raw.char_indices() {
        match c {
            '"' if prev != '\\' => in_str = !in_str,
            '#' if !in_str => return &raw[..i],
            _ => {}
        }
        prev = c;
    }
    raw
}

const CONDITIONS: &[&str] = &[
    "o", "no", "b", "c", "nae", "nb", "nc", "ae", "e", "z", "ne", "nz", "be", "na", "nbe", "a",
    "s", "ns", "p", "pe", "np", "po", "l", "nge", "nl", "ge", "le", "ng", "nle", "g",
];

/// The condition of a jcc mnemonic (`jne` → `ne`), None for anything else.
pub fn jcc_condition(mnemonic: &str) -> Option<&str> {
    let cc = mnemonic.strip_prefix('j')?;
    CONDITIONS.contains(&cc).then_some(cc)
}

/// A conditional jump to a plain label (not `jcc *%rax`, which does not exist,
/// nor a computed target).
pub fn is_jcc(line: &Line) -> Option<(&str, &str)> {
    match line {
        Line::Instr { mnemonic, operands } => {
            let cc = jcc_condition(mnemonic)?;
            let ok = !operands.is_empty() && !operands.contains(['*', '%', ',', ' ']);
            ok.then_some((cc, operands.as_str()))
        }
        _ => None,
    }
}

/// How an instruction touches the six status flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagUse {
    /// Reads at least one status flag.
    Reads,
    /// Writes all six and reads none: flags before it are dead.
    Kills,
    /// Neither (or writes only some, which keeps older flags possibly live).
    Neutral,
    /// Leaves the function (call and ret: the ABI does not preserve flags).
    Exits,
    /// Unconditional jump to the named label.
    Jump,
    /// Unconditional indirect jump: the scan gives up.
    Unknown,
}

fn without_suffix(m: &str) -> &str {
    for base in [
        "cmp", "test", "add", "sub", "and", "or", "xor", "neg", "adc", "sbb", "rcl", "rcr",
        "pushf", "popf",
    ] {
        if m == base
            || (m.len() == base.len() + 1
                && m.starts_with(base)
                && m.ends_with(['b', 'w', 'l', 'q']))
        {
            return base;
        }
    }
    m
}

/// Classifies an instruction by its effect on the status flags.
pub fn flag_use(mnemonic: &str, operands: &str) -> FlagUse {
    let m = mnemonic;
    if m.starts_with("call") || m.starts_with("ret") {
        return FlagUse::Exits;
    }
    if m == "jmp" || m == "jmpq" {
        return if operands.starts_with('*') {
            FlagUse::Unknown
        } else {
            FlagUse::Jump
        };
    }
    if jcc_condition(m).is_some() || m.starts_with("set") || m.starts_with("cmov") || m == "lahf" {
        return FlagUse::Reads;
    }
    match without_suffix(m) {
        "adc" | "sbb" | "rcl" | "rcr" | "pushf" => FlagUse::Reads,
        "cmp" | "test" | "add" | "sub" | "and" | "or" | "xor" | "neg" => FlagUse::Kills,
        "ucomiss" | "ucomisd" | "comiss" | "comisd" => FlagUse::Kills,
        _ => FlagUse::Neutral,
    }
}

/// Lines a flags-liveness scan may look at before assuming "live".
const SCAN_LIMIT: usize = 400;

/// Whether the status flags may be read, on the path that starts at line
/// `start` (before that line executes), before something overwrites them.
/// Conservative: anything it cannot follow counts as live.
pub fn flags_live(lines: &[Line], start: usize, label_at: &impl Fn(&str) -> Option<usize>) -> bool {
    let mut i = start;
    let mut jumps = 0;
    for _ in 0..SCAN_LIMIT {
        let Some(line) = lines.get(i) else {
            return true;
        };
        match line {
            Line::Instr { mnemonic, operands } => match flag_use(mnemonic, operands) {
                FlagUse::Reads | FlagUse::Unknown => return true,
                FlagUse::Kills | FlagUse::Exits => return false,
                FlagUse::Neutral => {}
                FlagUse::Jump => {
                    jumps += 1;
                    match label_at(operands) {
                        Some(target) if jumps < 8 => {
                            i = target;
                            continue;
                        }
                        _ => return true,
                    }
                }
            },
            Line::Directive(d)
                if d.starts_with(".cfi_endproc")
                    || d.starts_with(".size")
                    || d.starts_with(".section")
                    || d.starts_with(".text") =>
            {
                return true
            }
            _ => {}
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_classified() {
        assert_eq!(parse_line(".L3:"), Line::Label(".L3".into()));
        assert_eq!(
            parse_line(".LBB0_18:                # in Loop"),
            Line::Label(".LBB0_18".into())
        );
        assert_eq!(
            parse_line("\tcmpq\t$499999, %r10                   # imm = 0x7A11F"),
            Line::Instr {
                mnemonic: "cmpq".into(),
                operands: "$499999, %r10".into()
            }
        );
        assert_eq!(
            parse_line("\t.string \"a#b\""),
            Line::Directive(".string \"a#b\"".into())
        );
        assert_eq!(parse_line("# %bb.19:"), Line::Other);
        assert_eq!(is_jcc(&parse_line("\tjne\t.L3")), Some(("ne", ".L3")));
        assert_eq!(is_jcc(&parse_line("\tjmp\t.L3")), None);
        assert_eq!(is_jcc(&parse_line("\tjrcxz\t.L3")), None);
        assert_eq!(
            is_jcc(&parse_line("\tjne\tfoo@PLT")),
            Some(("ne", "foo@PLT"))
        );
    }

    #[test]
    fn flags_liveness_follows_the_path() {
        let text = "\tjl .L1\n\tmovl $1, %eax\n\tje .L2\n.L1:\n\tmovl %ebx, %ecx\n\tcmpl $3, %ecx\n\tjg .L2\n.L2:\n\tjmp .L1\n";
        let lines: Vec<Line> = text.lines().map(parse_line).collect();
        let label_at = |name: &str| {
            lines
                .iter()
                .position(|l| *l == Line::Label(name.to_string()))
        };
        // After `jl`: `je` reads the flags.
        assert!(flags_live(&lines, 1, &label_at));
        // At .L1: `cmpl` overwrites them first.
        assert!(!flags_live(&lines, 3, &label_at));
        // At .L2: jmp .L1 leads to the cmpl.
        assert!(!flags_live(&lines, 7, &label_at));
        // Calls end liveness; adc reads CF.
        let l2: Vec<Line> = ["\tcall f", "\tadcl $0, %eax"]
            .iter()
            .map(|s| parse_line(s))
            .collect();
        assert!(!flags_live(&l2, 0, &|_| None));
        assert!(flags_live(&l2, 1, &|_| None));
    }
}
