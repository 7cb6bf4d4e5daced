//! Reader for callgrind output files: the exact reference counts.
//!
//! Run the program under
//! `valgrind --tool=callgrind --dump-instr=yes --collect-jumps=yes --callgrind-out-file=F`
//! and [`parse`] the file. The result holds, per object (`ob=`), how often each
//! instruction ran and how often each control transfer was taken.
//!
//! Format facts this reader relies on (callgrind 3.19 output, checked against
//! real files in the tests below):
//! - Cost lines are `POSITIONS COSTS`, where `positions:` in the header names
//!   the position columns (`instr`, `line`, or both, in that order). A position
//!   is absolute (`0x1140`, `42`), relative to the previous cost line's position
//!   of the same column (`+5`, `-45`), or the same (`*`).
//! - `jcnd=TAKEN/EXECUTED TARGET` and `jump=COUNT TARGET` are followed by a
//!   line giving the jump's own position (no cost). `calls=COUNT TARGET` is
//!   followed by the call instruction's position and its *inclusive* cost,
//!   which is not an execution count and is not added to the instruction.
//!   The target and the source are both relative to the previous cost line;
//!   the target does not move the reference point.
//! - Names may be compressed: `ob=(3) /lib/libc.so.6` defines id 3 and a later
//!   `ob=(3)` refers to it; `cob=` shares the `ob=` ids and names the callee's
//!   object for the next `calls=` line only.
//! - Addresses are each object's link-time addresses, that is module offsets
//!   for PIE executables and shared libraries.
//!
//! Callgrind's default `--skip-plt=yes` charges the cost of PLT stubs to the
//! calling instruction, so a call through the PLT may show a count a few units
//! above its real execution count; jump and call counts are not affected.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

pub use crate::Branch;
use crate::ParseError;

/// Counts of a conditional jump towards one target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConditionalCount {
    /// Executions that jumped to the target.
    pub taken: u64,
    /// Executions of the jump instruction.
    pub executed: u64,
}

/// A call whose callee lives in another object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrossObjectCall {
    /// Address of the call instruction in the caller's object.
    pub from: u64,
    /// Path of the callee's object.
    pub callee_object: String,
    /// Address of the callee's entry in its object.
    pub to: u64,
    /// Number of calls.
    pub count: u64,
}

/// Exact counts for one object (executable or shared library).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectProfile {
    /// Instruction address -> number of executions (first event column, `Ir`).
    pub instructions: BTreeMap<u64, u64>,
    /// Conditional jumps (`jcnd=`): taken and executed counts per target.
    pub conditional: BTreeMap<Branch, ConditionalCount>,
    /// Unconditional jumps (`jump=`) within the object.
    pub jumps: BTreeMap<Branch, u64>,
    /// Calls (`calls=`) whose callee is in the same object.
    pub calls: BTreeMap<Branch, u64>,
    /// Calls into other objects.
    pub cross_object_calls: Vec<CrossObjectCall>,
}

impl ObjectProfile {
    /// Every taken transfer within the object: taken conditional jumps,
    /// unconditional jumps and calls, with their counts (zero counts left out).
    pub fn taken_edges(&self) -> BTreeMap<Branch, u64> {
        let mut edges = BTreeMap::new();
        let conditional = self.conditional.iter().map(|(e, c)| (*e, c.taken));
        let jumps = self.jumps.iter().map(|(e, c)| (*e, *c));
        let calls = self.calls.iter().map(|(e, c)| (*e, *c));
        for (edge, count) in conditional.chain(jumps).chain(calls) {
            if count > 0 {
                *edges.entry(edge).or_insert(0) += count;
            }
        }
        edges
    }

    /// Sum of all instruction executions.
    pub fn total_instructions(&self) -> u64 {
        self.instructions.values().sum()
    }
}

/// The valgrind arguments that make the exact reference this module reads:
/// per-instruction counts and conditional and unconditional jump counts,
/// written to `out`.
pub fn valgrind_args(out: &Path) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = [
        "--tool=callgrind",
        "--dump-instr=yes",
        "--collect-jumps=yes",
    ]
    .map(Into::into)
    .to_vec();
    args.push(format!("--callgrind-out-file={}", out.display()).into());
    args
}

/// Link-time address ranges of `binary` whose transfers callgrind never books
/// to the binary's own object, so a trace's edges there have no counterpart
/// in the reference:
/// - the PLT sections (`.plt`, `.plt.sec`, `.plt.got`): with `--skip-plt`,
///   its default, callgrind books a call or tail jump through a stub as a
///   call straight to the final target and never shows the stub;
/// - `.init` and `.fini`: valgrind 3.19's debug-info reader leaves them out
///   of the executable's mapping and books them to an object named `???` at
///   run-time addresses (measured on `_init`'s `je` over `__gmon_start__`).
pub fn unbooked_ranges(binary: &Path) -> Vec<(u64, u64)> {
    crate::elf::section_ranges(binary, |name| {
        name.starts_with(".plt") || name == ".init" || name == ".fini"
    })
}

/// A whole callgrind file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Profile {
    /// The `cmd:` header, when present.
    pub command: Option<String>,
    /// Object path (as callgrind names it) -> counts.
    pub objects: BTreeMap<String, ObjectProfile>,
}

impl Profile {
    /// The object whose path ends with `/name` or equals `name`.
    pub fn object_by_basename(&self, name: &str) -> Option<(&str, &ObjectProfile)> {
        self.objects
            .iter()
            .find(|(path, _)| {
                Path::new(path.as_str())
                    .file_name()
                    .and_then(|n| n.to_str())
                    == Some(name)
            })
            .map(|(p, o)| (p.as_str(), o))
    }
}

/// Reads and parses a callgrind output file.
pub fn parse_file(path: &Path) -> Result<Profile, ParseError> {
    let text = std::fs::read_to_string(path).map_err(|e| ParseError::io("callgrind", path, e))?;
    parse(&text).map_err(|e| e.in_file(path))
}

/// What the line after a `jcnd=`, `jump=` or `calls=` line completes.
enum Pending {
    Conditional {
        taken: u64,
        executed: u64,
        target: u64,
    },
    Jump {
        count: u64,
        target: u64,
    },
    Call {
        count: u64,
        object: usize,
        target: u64,
    },
}

/// Parser state: the current object, the name tables and the reference
/// positions that relative positions are added to.
struct State {
    objects: Vec<String>,
    object_ids: HashMap<u64, usize>,
    current_object: Option<usize>,
    callee_object: Option<usize>,
    /// Number of position columns and the index of the `instr` column.
    position_columns: usize,
    instr_column: Option<usize>,
    /// Reference position of each column (the previous cost line's).
    last: Vec<i128>,
    pending: Option<Pending>,
}

/// Parses the text of a callgrind output file.
pub fn parse(text: &str) -> Result<Profile, ParseError> {
    let mut profile = Profile::default();
    let mut per_object: Vec<ObjectProfile> = Vec::new();
    let mut state = State {
        objects: Vec::new(),
        object_ids: HashMap::new(),
        current_object: None,
        callee_object: None,
        position_columns: 1,
        instr_column: None,
        last: vec![0],
        pending: None,
    };
    for (index, raw) in text.lines().enumerate() {
        let line_no = index + 1;
        let err = |message: String| ParseError::new("callgrind", line_no, message);
        let line = raw.trim_end();
        if let Some(pending) = state.pending.take() {
            let source = parse_positions(&mut state, line, false).map_err(err)?;
            let from = source.ok_or_else(|| {
                err("jump or call source line has no instruction position".into())
            })?;
            let object = current(&state).map_err(err)?;
            let counts = &mut per_object[object];
            match pending {
                Pending::Conditional {
                    taken,
                    executed,
                    target,
                } => {
                    let c = counts
                        .conditional
                        .entry(Branch { from, to: target })
                        .or_default();
                    c.taken += taken;
                    c.executed += executed;
                }
                Pending::Jump { count, target } => {
                    *counts.jumps.entry(Branch { from, to: target }).or_insert(0) += count;
                }
                Pending::Call {
                    count,
                    object: callee,
                    target,
                } if callee == object => {
                    *counts.calls.entry(Branch { from, to: target }).or_insert(0) += count;
                }
                Pending::Call {
                    count,
                    object: callee,
                    target,
                } => {
                    counts.cross_object_calls.push(CrossObjectCall {
                        from,
                        callee_object: state.objects[callee].clone(),
                        to: target,
                        count,
                    });
                }
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let first = line.as_bytes()[0];
        if first.is_ascii_digit() || matches!(first, b'+' | b'-' | b'*') {
            let object = current(&state).map_err(err)?;
            if state.instr_column.is_none() {
                return Err(err(
                    "no instruction positions: record with valgrind --tool=callgrind \
                     --dump-instr=yes"
                        .into(),
                ));
            }
            let (address, cost) = parse_cost_line(&mut state, line).map_err(err)?;
            if let Some(address) = address {
                *per_object[object].instructions.entry(address).or_insert(0) += cost;
            }
            continue;
        }
        let Some((key, value)) = split_key(line) else {
            return Err(err(format!("unrecognised line '{line}'")));
        };
        match key {
            "ob" => {
                let id = name_id(&mut state, value, &mut per_object).map_err(err)?;
                state.current_object = Some(id);
            }
            "cob" => {
                let id = name_id(&mut state, value, &mut per_object).map_err(err)?;
                state.callee_object = Some(id);
            }
            "positions" => {
                let columns: Vec<&str> = value.split_whitespace().collect();
                state.position_columns = columns.len();
                state.instr_column = columns.iter().position(|c| *c == "instr");
                state.last = vec![0; columns.len()];
            }
            "part" => state.last.iter_mut().for_each(|p| *p = 0),
            "cmd" => profile.command = Some(value.trim().to_string()),
            "jcnd" => {
                let (counts, rest) = split_count(value).map_err(err)?;
                let (taken, executed) = counts
                    .split_once('/')
                    .and_then(|(t, e)| Some((t.parse().ok()?, e.parse().ok()?)))
                    .ok_or_else(|| err(format!("bad jcnd counts '{counts}'")))?;
                let target = target_address(&mut state, rest).map_err(err)?;
                state.pending = Some(Pending::Conditional {
                    taken,
                    executed,
                    target,
                });
            }
            "jump" => {
                let (count, rest) = split_count(value).map_err(err)?;
                let count = parse_count(count).map_err(err)?;
                let target = target_address(&mut state, rest).map_err(err)?;
                state.pending = Some(Pending::Jump { count, target });
            }
            "calls" => {
                let (count, rest) = split_count(value).map_err(err)?;
                let count = parse_count(count).map_err(err)?;
                let target = target_address(&mut state, rest).map_err(err)?;
                let object = match state.callee_object.take() {
                    Some(o) => o,
                    None => current(&state).map_err(err)?,
                };
                state.pending = Some(Pending::Call {
                    count,
                    object,
                    target,
                });
            }
            // File, function and header lines carry nothing this reader needs.
            _ => {}
        }
    }
    if state.pending.is_some() {
        return Err(ParseError::new(
            "callgrind",
            text.lines().count(),
            "file ends after a jump or call line without its source line".into(),
        ));
    }
    for (name, counts) in state.objects.into_iter().zip(per_object) {
        let entry = profile.objects.entry(name).or_default();
        merge(entry, counts);
    }
    Ok(profile)
}

fn merge(into: &mut ObjectProfile, from: ObjectProfile) {
    for (a, c) in from.instructions {
        *into.instructions.entry(a).or_insert(0) += c;
    }
    for (e, c) in from.conditional {
        let t = into.conditional.entry(e).or_default();
        t.taken += c.taken;
        t.executed += c.executed;
    }
    for (e, c) in from.jumps {
        *into.jumps.entry(e).or_insert(0) += c;
    }
    for (e, c) in from.calls {
        *into.calls.entry(e).or_insert(0) += c;
    }
    into.cross_object_calls.extend(from.cross_object_calls);
}

fn current(state: &State) -> Result<usize, String> {
    state
        .current_object
        .ok_or_else(|| "cost or jump line before any ob= line".to_string())
}

/// Splits `key=value`; keys are lowercase ASCII letters.
fn split_key(line: &str) -> Option<(&str, &str)> {
    let (key, value) = line.split_once(['=', ':'])?;
    key.bytes()
        .all(|b| b.is_ascii_lowercase())
        .then_some((key, value))
}

fn split_count(value: &str) -> Result<(&str, &str), String> {
    let value = value.trim_start();
    Ok(value.split_once(' ').unwrap_or((value, "")))
}

fn parse_count(text: &str) -> Result<u64, String> {
    text.parse().map_err(|_| format!("bad count '{text}'"))
}

/// Resolves `(id) name`, `(id)` or a plain name to an index into the object
/// table, creating the entry on first sight.
fn name_id(
    state: &mut State,
    value: &str,
    per_object: &mut Vec<ObjectProfile>,
) -> Result<usize, String> {
    let value = value.trim();
    let (id, name) = match value.strip_prefix('(') {
        Some(rest) => {
            let (id, name) = rest
                .split_once(')')
                .ok_or_else(|| format!("unclosed name id in '{value}'"))?;
            let id: u64 = id
                .parse()
                .map_err(|_| format!("bad name id in '{value}'"))?;
            (Some(id), name.trim())
        }
        None => (None, value),
    };
    if let Some(id) = id {
        if name.is_empty() {
            return state
                .object_ids
                .get(&id)
                .copied()
                .ok_or_else(|| format!("object id ({id}) used before it is defined"));
        }
    }
    let index = match state.objects.iter().position(|o| o == name) {
        Some(i) => i,
        None => {
            state.objects.push(name.to_string());
            per_object.push(ObjectProfile::default());
            state.objects.len() - 1
        }
    };
    if let Some(id) = id {
        state.object_ids.insert(id, index);
    }
    Ok(index)
}

/// Parses one position column against its reference value.
fn parse_position(text: &str, last: i128) -> Result<i128, String> {
    let number = |t: &str| -> Result<i128, String> {
        let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            Some(hex) => i128::from_str_radix(hex, 16),
            None => t.parse(),
        };
        parsed.map_err(|_| format!("bad position '{text}'"))
    };
    match text.as_bytes().first() {
        Some(b'*') if text.len() == 1 => Ok(last),
        Some(b'+') => Ok(last + number(&text[1..])?),
        Some(b'-') => Ok(last - number(&text[1..])?),
        _ => number(text),
    }
}

/// Parses the position columns at the start of `line`. With `update`, the
/// positions become the new reference. Returns the instruction address.
fn parse_positions(state: &mut State, line: &str, update: bool) -> Result<Option<u64>, String> {
    let mut fields = line.split_whitespace();
    let mut address = None;
    for column in 0..state.position_columns {
        let Some(field) = fields.next() else {
            return Err(format!(
                "expected {} position(s) in '{line}'",
                state.position_columns
            ));
        };
        let value = parse_position(field, state.last[column])?;
        if update {
            state.last[column] = value;
        }
        if Some(column) == state.instr_column {
            address =
                Some(u64::try_from(value).map_err(|_| format!("negative address in '{line}'"))?);
        }
    }
    Ok(address)
}

/// A cost line: positions, then costs; the first cost column is the count.
fn parse_cost_line(state: &mut State, line: &str) -> Result<(Option<u64>, u64), String> {
    let address = parse_positions(state, line, true)?;
    let cost = line
        .split_whitespace()
        .nth(state.position_columns)
        .map(parse_count)
        .transpose()?
        .unwrap_or(0);
    Ok((address, cost))
}

/// The target position of a jump or call line; it does not move the reference.
fn target_address(state: &mut State, text: &str) -> Result<u64, String> {
    parse_positions(state, text, false)?
        .ok_or_else(|| "jump or call target has no instruction position".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = "\
# callgrind format
version: 1
creator: callgrind-3.19.0
cmd:  ./loop
part: 1
positions: instr line
events: Ir
summary: 40

ob=(5) /tmp/loop
fl=(1) loop.c
fn=(1) main
0x1140 4 1
+2 * 1
+13 +3 1
cfn=(2) step
calls=3 +80 -4
* * 9
+5 * 3
jcnd=2/3 -5 +1
* *
+2 +5 1
jump=1 0x1140 0
* 0
cob=(3) /lib/libc.so.6
cfn=(3) printf
calls=1 0x525b0 17
* * 2678
fn=(2)
0x11e0 3 3
+6 * 3
ob=(3)
fn=(3)
0x525b0 1 1
";

    #[test]
    fn reads_costs_jumps_and_calls() {
        let profile = parse(SMALL).unwrap();
        assert_eq!(profile.command.as_deref(), Some("./loop"));
        let main = &profile.objects["/tmp/loop"];
        let expected: BTreeMap<u64, u64> = [
            (0x1140, 1),
            (0x1142, 1),
            (0x114f, 1),
            (0x1154, 3),
            (0x1156, 1),
            (0x11e0, 3),
            (0x11e6, 3),
        ]
        .into_iter()
        .collect();
        assert_eq!(main.instructions, expected);
        let call = Branch {
            from: 0x114f,
            to: 0x114f + 80,
        };
        assert_eq!(main.calls[&call], 3);
        let jcc = Branch {
            from: 0x1154,
            to: 0x114f,
        };
        assert_eq!(
            main.conditional[&jcc],
            ConditionalCount {
                taken: 2,
                executed: 3
            }
        );
        assert_eq!(
            main.jumps[&Branch {
                from: 0x1156,
                to: 0x1140
            }],
            1
        );
        assert_eq!(
            main.cross_object_calls,
            vec![CrossObjectCall {
                from: 0x1156,
                callee_object: "/lib/libc.so.6".into(),
                to: 0x525b0,
                count: 1
            }]
        );
        let taken = main.taken_edges();
        assert_eq!(taken.len(), 3);
        assert_eq!(taken[&jcc], 2);
        let libc = &profile.objects["/lib/libc.so.6"];
        assert_eq!(libc.instructions[&0x525b0], 1);
        assert!(profile.object_by_basename("loop").is_some());
    }

    #[test]
    fn instr_only_positions_and_decimal_addresses() {
        let text =
            "positions: instr\nevents: Ir Dr\nob=a.out\nfn=f\n4096 2 7\n+1 3\njump=5 4096\n*\n";
        let profile = parse(text).unwrap();
        let a = &profile.objects["a.out"];
        assert_eq!(a.instructions[&4096], 2);
        assert_eq!(a.instructions[&4097], 3);
        assert_eq!(
            a.jumps[&Branch {
                from: 4097,
                to: 4096
            }],
            5
        );
    }

    #[test]
    fn zero_taken_conditionals_are_not_taken_edges() {
        let text = "positions: instr\nob=x\n0x10 1\njcnd=0/1 +8\n*\n";
        let profile = parse(text).unwrap();
        assert!(profile.objects["x"].taken_edges().is_empty());
        assert_eq!(profile.objects["x"].conditional.len(), 1);
    }

    #[test]
    fn rejects_bad_input_with_line_numbers() {
        let e = parse("positions: instr\nob=x\n0x10 1\njcnd=a/b +8\n*\n").unwrap_err();
        assert_eq!(e.line, 4, "{e}");
        let e = parse("positions: instr\n0x10 1\n").unwrap_err();
        assert!(e.to_string().contains("before any ob="), "{e}");
        let e = parse("positions: instr\nob=(2)\n").unwrap_err();
        assert!(e.to_string().contains("used before"), "{e}");
        let e = parse("positions: instr\nob=x\n0x10 1\njump=1 +3\n").unwrap_err();
        assert!(e.to_string().contains("without its source"), "{e}");
        let e = parse("positions: line\nob=x\n10 1\n").unwrap_err();
        assert!(e.to_string().contains("--dump-instr=yes"), "{e}");
    }

    /// The reader against real valgrind output of a program whose counts are
    /// known by construction.
    #[test]
    fn real_callgrind_counts_match_the_program() {
        use crate::tools;
        use object::{Object, ObjectSymbol};
        let (Some(clang), Some(valgrind)) =
            (tools::require("clang-19"), tools::require("valgrind"))
        else {
            return;
        };
        let dir = tools::scratch_dir("callgrind").unwrap();
        let source = dir.join("loop.c");
        std::fs::write(
            &source,
            "#include <stdio.h>\n\
             __attribute__((noinline)) unsigned step(unsigned x) { return x * 1103515245u + 12345u; }\n\
             int main(void) {\n\
               unsigned s = 1, acc = 0;\n\
               for (int i = 0; i < 1000; i++) { s = step(s); acc ^= s; }\n\
               printf(\"%u\\n\", acc);\n\
               return 0;\n\
             }\n",
        )
        .unwrap();
        let binary = dir.join("loop");
        tools::compile_c(&clang, &[&source], &binary, &[]).unwrap();
        let out = dir.join("callgrind.out");
        let status = std::process::Command::new(valgrind)
            .args(valgrind_args(&out))
            .arg(&binary)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        let profile = parse_file(&out).unwrap();

        let data = std::fs::read(&binary).unwrap();
        let elf = object::File::parse(&*data).unwrap();
        let symbol = |name: &str| {
            let s = elf.symbols().find(|s| s.name() == Ok(name)).unwrap();
            (s.address(), s.address() + s.size())
        };
        let (step, _) = symbol("step");
        let (main_begin, main_end) = symbol("main");
        let (_, counts) = profile.object_by_basename("loop").unwrap();
        assert_eq!(counts.instructions[&step], 1000);
        let calls: Vec<_> = counts.calls.iter().filter(|(e, _)| e.to == step).collect();
        assert_eq!(calls.len(), 1, "{calls:?}");
        let (call, &count) = calls[0];
        assert_eq!(count, 1000);
        assert!((main_begin..main_end).contains(&call.from));
        // The loop's back edge: one conditional jump in main, taken 999 of 1000.
        let back: Vec<_> = counts
            .conditional
            .iter()
            .filter(|(e, _)| (main_begin..main_end).contains(&e.from))
            .collect();
        assert_eq!(back.len(), 1, "{back:?}");
        assert_eq!(
            *back[0].1,
            ConditionalCount {
                taken: 999,
                executed: 1000
            }
        );
        assert!(back[0].0.to < back[0].0.from);
        assert!(profile.objects.keys().any(|o| o.contains("libc.so")));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
