//! perf.script: the text `perf script -F ip,brstack --show-mmap-events`
//! prints, which llvm-profgen's `--perfscript` reads and the library
//! writes in its place (DESIGN.md, "Output formats").
//!
//! A `PERF_RECORD_MMAP2` line per executable file mapping, then one line
//! per distinct trace: the sample ip (hex, no prefix), then the taken
//! branches newest first, each `0xFROM/0xTO/P/-/-/0`. A line holding only
//! a decimal count above one says how often the trace after it was
//! recorded.
//!
//! With call stacks (`callstack`, `record -g`) each trace is a *hybrid*
//! sample, as `perf script -F ip,brstack` prints a `perf record -b -g`
//! sample and llvm-profgen's hybrid reader expects: after the count line,
//! one indented line per frame, leaf first, hex without a prefix (the
//! leaf's pc, then return addresses); then the branches on a line that
//! begins with a space and `0x`, without the sample ip. A trace written
//! without a stack in such a file is a branch line alone (llvm-profgen
//! skips it when it builds a context-sensitive profile).
//!
//! The writer's line functions and the reader are here together,
//! so that what the library writes is what profiler-ctl, bench-harness and
//! the tests read.

use std::fmt::Write;

/// One taken control transfer: the address of the transfer instruction
/// and the address it went to (runtime addresses in a perf.script; other
/// readers say which address space theirs are in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Branch {
    /// Address of the transfer instruction.
    pub from: u64,
    /// Address it transferred to.
    pub to: u64,
}

/// One `PERF_RECORD_MMAP2` line: an executable file mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mmap {
    pub pid: u32,
    pub tid: u32,
    /// Runtime start address of the mapping.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
    /// File offset the mapping starts at.
    pub pgoff: u64,
    pub major: u32,
    pub minor: u32,
    pub inode: u64,
    pub generation: u64,
    /// Protection string, e.g. `r-xp`.
    pub prot: String,
    pub path: String,
}

impl Mmap {
    /// True when `address` lies in the mapping.
    pub fn contains(&self, address: u64) -> bool {
        address >= self.start && address - self.start < self.len
    }

    /// Whether the mapping is executable (`x` in its protection).
    pub fn executable(&self) -> bool {
        self.prot.as_bytes().get(2) == Some(&b'x')
    }

    /// Appends the mapping's line to `out`.
    pub fn write(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "PERF_RECORD_MMAP2 {}/{}: [{:#x}({:#x}) @ {:#x} {:02x}:{:02x} {} {}]: {} {}",
            self.pid,
            self.tid,
            self.start,
            self.len,
            self.pgoff,
            self.major,
            self.minor,
            self.inode,
            self.generation,
            self.prot,
            self.path
        );
    }
}

/// One distinct trace with its repeat count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// The sample ip field.
    pub ip: u64,
    /// Taken branches as written: newest first, runtime addresses.
    pub entries_newest_first: Vec<Branch>,
    /// How many times this exact trace was recorded (1 without a count line).
    pub count: u64,
    /// The call stack at the newest branch, leaf first (the leaf's pc,
    /// then return addresses); empty when the sample has none.
    pub stack: Vec<u64>,
}

impl Trace {
    /// The entries oldest first, in the order the program executed them.
    pub fn execution_order(&self) -> impl DoubleEndedIterator<Item = &Branch> + ExactSizeIterator {
        self.entries_newest_first.iter().rev()
    }
}

/// Appends one trace to `out`: its count line when above one, then its
/// sample line, whose ip is where the newest branch went.
pub fn write_trace(out: &mut String, count: u64, newest_first: impl IntoIterator<Item = Branch>) {
    if count > 1 {
        let _ = writeln!(out, "{count}");
    }
    let mut entries = newest_first.into_iter().peekable();
    let ip = entries.peek().map_or(0, |e| e.to);
    push_hex(out, ip);
    push_branches(out, entries);
}

/// Appends `value` as `{:x}` writes it (lower case, no prefix, no leading
/// zeros). A library writes one line of about 5 KB per distinct trace at
/// exit, on the application's time: through `core::fmt` that was about 2%
/// of SQLite's CPU at 128 branches and 1 ms, most of it in the formatter's
/// machinery around each number.
pub fn push_hex(out: &mut String, value: u64) {
    let mut buf = [0u8; 16];
    let n = hex_into(&mut buf, value);
    // SAFETY: hex digits, from HEX_PAIRS.
    unsafe { push_ascii(out, &buf[..n]) };
}

/// Each byte value's two hex digits.
const HEX_PAIRS: [[u8; 2]; 256] = {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut pairs = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        pairs[i] = [DIGITS[i >> 4], DIGITS[i & 0xf]];
        i += 1;
    }
    pairs
};

/// Writes `value` in hex (as [`push_hex`]) at the start of `buf`, which
/// has room for 16 digits (the bytes past the digits are overwritten);
/// returns the digits written. All 16 digits are made a byte at a time and
/// moved to the front in one shift, with no loop over the digit count and
/// no copy of a length known only at run time (each was a call of libc's
/// memmove): the stop of a SQLite session formats 60,000 addresses.
#[inline]
fn hex_into(buf: &mut [u8], value: u64) -> usize {
    let mut all = [0u8; 16];
    for (pair, byte) in all.chunks_exact_mut(2).zip(value.to_be_bytes()) {
        pair.copy_from_slice(&HEX_PAIRS[byte as usize]);
    }
    let n = (16 - value.leading_zeros() as usize / 4).max(1);
    let front = u128::from_be_bytes(all) << (8 * (16 - n));
    buf[..16].copy_from_slice(&front.to_be_bytes());
    n
}

/// Appends bytes this module wrote (hex digits and punctuation) to `out`,
/// without the check of every byte that `str::from_utf8` or `is_ascii`
/// make (each was about a fifth of the branch lines' time).
///
/// # Safety
/// `bytes` must be ASCII.
#[inline]
unsafe fn push_ascii(out: &mut String, bytes: &[u8]) {
    debug_assert!(bytes.is_ascii());
    // SAFETY: ASCII bytes (the caller's promise) are whole UTF-8
    // characters, so `out` stays UTF-8.
    unsafe { out.as_mut_vec() }.extend_from_slice(bytes);
}

/// Appends ` 0xFROM/0xTO/P/-/-/0` per branch, then the line's end.
fn push_branches(out: &mut String, branches: impl IntoIterator<Item = Branch>) {
    let branches = branches.into_iter();
    out.reserve(branches.size_hint().0 * 40 + 1);
    // " 0x" + 16 + "/0x" + 16 + "/P/-/-/0"
    let mut buf = [0u8; 46];
    for e in branches {
        let mut at = 0;
        for (prefix, value) in [(&b" 0x"[..], e.from), (&b"/0x"[..], e.to)] {
            buf[at..at + 3].copy_from_slice(prefix);
            at += 3;
            at += hex_into(&mut buf[at..], value);
        }
        buf[at..at + 8].copy_from_slice(b"/P/-/-/0");
        // SAFETY: hex digits (HEX_PAIRS) between ASCII literals.
        unsafe { push_ascii(out, &buf[..at + 8]) };
    }
    out.push('\n');
}

/// Appends one hybrid sample to `out`: its count line when above one, one
/// indented line per frame of `stack` (leaf first), then its branches,
/// newest first, on a line that begins with a space (no sample ip). An
/// empty `stack` writes the branch line alone.
pub fn write_hybrid_trace(
    out: &mut String,
    count: u64,
    stack: &[u64],
    newest_first: impl IntoIterator<Item = Branch>,
) {
    if count > 1 {
        let _ = writeln!(out, "{count}");
    }
    for &frame in stack {
        out.push('\t');
        push_hex(out, frame);
        out.push('\n');
    }
    push_branches(out, newest_first);
}

/// A whole perf.script file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PerfScript {
    pub mmaps: Vec<Mmap>,
    pub traces: Vec<Trace>,
}

/// What was wrong with a perf.script, and on which line (1-based).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("perf.script line {line}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

impl PerfScript {
    /// Number of traces, counting repeats.
    pub fn trace_count(&self) -> u64 {
        self.traces.iter().map(|t| t.count).sum()
    }

    /// Number of branch entries, counting repeats.
    pub fn entry_count(&self) -> u64 {
        self.traces
            .iter()
            .map(|t| t.count * t.entries_newest_first.len() as u64)
            .sum()
    }

    /// Taken-branch counts over all traces (runtime addresses, repeats
    /// counted).
    pub fn edge_counts(&self) -> std::collections::BTreeMap<Branch, u64> {
        let mut counts = std::collections::BTreeMap::new();
        for trace in &self.traces {
            for edge in &trace.entries_newest_first {
                *counts.entry(*edge).or_insert(0) += trace.count;
            }
        }
        counts
    }

    /// Parses perf.script text.
    pub fn parse(text: &str) -> Result<PerfScript, ParseError> {
        let mut script = PerfScript::default();
        let mut pending_count: Option<(usize, u64)> = None;
        let mut pending_stack: Option<(usize, Vec<u64>)> = None;
        for (index, raw) in text.lines().enumerate() {
            let line_no = index + 1;
            let err = |message: String| ParseError {
                line: line_no,
                message,
            };
            let line = raw.trim();
            if line.is_empty() {
                continue;
            }
            if line.starts_with("PERF_RECORD_MMAP2") {
                script.mmaps.push(parse_mmap(line).map_err(err)?);
                continue;
            }
            let indented = raw.starts_with([' ', '\t']);
            if indented && !line.contains([' ', '/']) {
                // A call-stack frame: hex, no prefix.
                let frame = u64::from_str_radix(line, 16)
                    .map_err(|_| err(format!("call-stack frame '{line}' is not hex")))?;
                pending_stack
                    .get_or_insert_with(|| (line_no, Vec::new()))
                    .1
                    .push(frame);
                continue;
            }
            if let Some((at, _)) = pending_stack.as_ref().filter(|_| !line.contains('/')) {
                return Err(ParseError {
                    line: *at,
                    message: "call stack not followed by its branch line".into(),
                });
            }
            if line.bytes().all(|b| b.is_ascii_digit()) {
                if let Some((at, _)) = pending_count {
                    return Err(ParseError {
                        line: at,
                        message: "repeat count line not followed by a sample".into(),
                    });
                }
                let count = line
                    .parse()
                    .map_err(|_| err(format!("bad repeat count '{line}'")))?;
                if count == 0 {
                    return Err(err("repeat count 0".into()));
                }
                pending_count = Some((line_no, count));
                continue;
            }
            let mut fields = line.split(' ').filter(|f| !f.is_empty()).peekable();
            let ip_text = fields.peek().copied().unwrap_or_default();
            let ip = if ip_text.contains('/') {
                // A hybrid sample's branch line: no sample ip.
                None
            } else {
                fields.next();
                Some(
                    u64::from_str_radix(ip_text, 16)
                        .map_err(|_| err(format!("sample ip '{ip_text}' is not hex")))?,
                )
            };
            let entries = fields
                .map(parse_entry)
                .collect::<Result<Vec<_>, _>>()
                .map_err(err)?;
            let count = pending_count.take().map_or(1, |(_, c)| c);
            let stack = pending_stack.take().map(|(_, s)| s).unwrap_or_default();
            let ip = ip
                .or(stack.first().copied())
                .or(entries.first().map(|e| e.to))
                .unwrap_or(0);
            script.traces.push(Trace {
                ip,
                entries_newest_first: entries,
                count,
                stack,
            });
        }
        if let Some((at, _)) = pending_count {
            return Err(ParseError {
                line: at,
                message: "repeat count at end of file".into(),
            });
        }
        if let Some((at, _)) = pending_stack {
            return Err(ParseError {
                line: at,
                message: "call stack at end of file".into(),
            });
        }
        Ok(script)
    }
}

fn hex(text: &str) -> Result<u64, String> {
    let digits = text
        .strip_prefix("0x")
        .ok_or_else(|| format!("'{text}' lacks the 0x prefix"))?;
    u64::from_str_radix(digits, 16).map_err(|_| format!("'{text}' is not hex"))
}

/// `0xFROM/0xTO/P/-/-/0`: the flag fields are not checked beyond their count.
fn parse_entry(text: &str) -> Result<Branch, String> {
    let parts: Vec<&str> = text.split('/').collect();
    if parts.len() < 2 {
        return Err(format!("branch entry '{text}' is not FROM/TO/..."));
    }
    Ok(Branch {
        from: hex(parts[0])?,
        to: hex(parts[1])?,
    })
}

/// `PERF_RECORD_MMAP2 PID/TID: [0xSTART(0xLEN) @ 0xPGOFF MAJ:MIN INODE GEN]: PROT PATH`
fn parse_mmap(line: &str) -> Result<Mmap, String> {
    let bad = |what: &str| format!("MMAP2 line: {what} in '{line}'");
    let rest = line["PERF_RECORD_MMAP2".len()..].trim_start();
    let (ids, rest) = rest.split_once(": [").ok_or_else(|| bad("no ': ['"))?;
    let (pid, tid) = ids.split_once('/').ok_or_else(|| bad("no PID/TID"))?;
    let pid = pid.trim().parse().map_err(|_| bad("bad pid"))?;
    let tid = tid.trim().parse().map_err(|_| bad("bad tid"))?;
    let (inside, rest) = rest.split_once("]: ").ok_or_else(|| bad("no ']: '"))?;
    let (range, rest_inside) = inside.split_once(" @ ").ok_or_else(|| bad("no ' @ '"))?;
    let (start, len) = range
        .split_once('(')
        .ok_or_else(|| bad("no '(' in range"))?;
    let start = hex(start).map_err(|e| bad(&e))?;
    let len = hex(len.trim_end_matches(')')).map_err(|e| bad(&e))?;
    let fields: Vec<&str> = rest_inside.split_whitespace().collect();
    let [pgoff, device, inode, generation] = fields[..] else {
        return Err(bad("expected PGOFF MAJ:MIN INODE GEN"));
    };
    let pgoff = hex(pgoff).map_err(|e| bad(&e))?;
    let (major, minor) = device.split_once(':').ok_or_else(|| bad("bad MAJ:MIN"))?;
    let major = u32::from_str_radix(major, 16).map_err(|_| bad("bad major"))?;
    let minor = u32::from_str_radix(minor, 16).map_err(|_| bad("bad minor"))?;
    let inode = inode.parse().map_err(|_| bad("bad inode"))?;
    let generation = generation.parse().map_err(|_| bad("bad generation"))?;
    let (prot, path) = rest
        .split_once(' ')
        .ok_or_else(|| bad("no protection and path"))?;
    Ok(Mmap {
        pid,
        tid,
        start,
        len,
        pgoff,
        major,
        minor,
        inode,
        generation,
        prot: prot.to_string(),
        path: path.trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = "\
PERF_RECORD_MMAP2 4242/4242: [0x55d0c1e01000(0x2000) @ 0x1000 08:01 131090 0]: r-xp /tmp/prog
PERF_RECORD_MMAP2 4242/4242: [0x7f0000028000(0x195000) @ 0x28000 fe:01 2345 0]: r-xp /usr/lib/x86_64-linux-gnu/libc.so.6
3
55d0c1e01180 0x55d0c1e01170/0x55d0c1e01180/P/-/-/0 0x55d0c1e01150/0x55d0c1e01160/P/-/-/0
 7f0000028010 0x7f0000028000/0x7f0000028010/P/-/-/0
";

    #[test]
    fn push_hex_writes_what_the_formatter_writes() {
        let mut values = vec![0, 1, 9, 0xa, 0xf, 0x10, 0xff, 0x100, u64::MAX, 1 << 63];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..1000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push(x >> (x % 64));
        }
        for v in values {
            let mut out = String::from("#");
            push_hex(&mut out, v);
            assert_eq!(out, format!("#{v:x}"));
        }
    }

    #[test]
    fn a_branch_line_is_what_the_formatter_writes() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x >> (x % 64)
        };
        let mut branches = vec![
            Branch {
                from: 0,
                to: u64::MAX,
            },
            Branch {
                from: 1 << 63,
                to: 0xf,
            },
        ];
        for _ in 0..500 {
            branches.push(Branch {
                from: next(),
                to: next(),
            });
        }
        let mut out = String::new();
        write_trace(&mut out, 2, branches.iter().copied());
        let mut want = format!("2\n{:x}", branches[0].to);
        for b in &branches {
            want += &format!(" 0x{:x}/0x{:x}/P/-/-/0", b.from, b.to);
        }
        want.push('\n');
        assert_eq!(out, want);
    }

    #[test]
    fn reads_mmaps_counts_and_entries() {
        let s = PerfScript::parse(SCRIPT).unwrap();
        assert_eq!(s.mmaps.len(), 2);
        let m = &s.mmaps[0];
        assert_eq!(
            (m.pid, m.tid, m.start, m.len, m.pgoff),
            (4242, 4242, 0x55d0c1e01000, 0x2000, 0x1000)
        );
        assert_eq!((m.major, m.minor, m.inode, m.generation), (8, 1, 131090, 0));
        assert_eq!((m.prot.as_str(), m.path.as_str()), ("r-xp", "/tmp/prog"));
        assert!(m.executable());
        assert_eq!(s.mmaps[1].major, 0xfe);
        assert!(m.contains(0x55d0c1e02fff) && !m.contains(0x55d0c1e03000));
        assert_eq!(s.traces.len(), 2);
        assert_eq!(s.traces[0].count, 3);
        assert_eq!(s.traces[1].count, 1);
        let order: Vec<u64> = s.traces[0].execution_order().map(|e| e.from).collect();
        assert_eq!(order, vec![0x55d0c1e01150, 0x55d0c1e01170]);
        assert_eq!(s.trace_count(), 4);
        assert_eq!(s.entry_count(), 7);
        let edge = Branch {
            from: 0x55d0c1e01170,
            to: 0x55d0c1e01180,
        };
        assert_eq!(s.edge_counts()[&edge], 3);
    }

    #[test]
    fn what_is_written_reads_back() {
        let mmap = Mmap {
            pid: 77,
            tid: 77,
            start: 0x55_0000_1000,
            len: 0x2000,
            pgoff: 0x1000,
            major: 0xfe,
            minor: 1,
            inode: 42,
            generation: 0,
            prot: "r-xp".into(),
            path: "/bin/my prog".into(),
        };
        let entries = [
            Branch {
                from: 0x10,
                to: 0x20,
            },
            Branch {
                from: 0x30,
                to: 0x40,
            },
        ];
        let mut text = String::new();
        mmap.write(&mut text);
        write_trace(&mut text, 3, entries.iter().rev().copied());
        write_trace(&mut text, 1, entries[..1].iter().copied());
        let s = PerfScript::parse(&text).unwrap();
        assert_eq!(s.mmaps, [mmap]);
        assert_eq!(s.traces.len(), 2);
        assert_eq!((s.traces[0].ip, s.traces[0].count), (0x40, 3));
        assert!(s.traces[0].execution_order().eq(entries.iter()));
        assert_eq!((s.traces[1].ip, s.traces[1].count), (0x20, 1));
    }

    #[test]
    fn hybrid_samples_read_back_with_their_stacks() {
        let entries = [
            Branch {
                from: 0x401010,
                to: 0x401100,
            },
            Branch {
                from: 0x401120,
                to: 0x401136,
            },
        ];
        let mut text = String::new();
        write_hybrid_trace(
            &mut text,
            2,
            &[0x401136, 0x401205, 0x401299],
            entries.iter().rev().copied(),
        );
        write_hybrid_trace(&mut text, 1, &[], entries[..1].iter().copied());
        // The frame lines are indented, so a leaf whose hex is all decimal
        // digits is not taken for a count.
        assert!(text.starts_with("2\n\t401136\n\t401205\n\t401299\n 0x401120/0x401136/"));
        let s = PerfScript::parse(&text).unwrap();
        assert_eq!(s.traces.len(), 2);
        assert_eq!(s.traces[0].stack, [0x401136, 0x401205, 0x401299]);
        assert_eq!((s.traces[0].ip, s.traces[0].count), (0x401136, 2));
        assert!(s.traces[0].execution_order().eq(entries.iter()));
        assert!(s.traces[1].stack.is_empty());
        assert_eq!(s.traces[1].ip, 0x401100);
        let e = PerfScript::parse("\t401136\n").unwrap_err();
        assert!(e.message.contains("end of file"), "{e}");
        let e = PerfScript::parse("\t401136\n3\n 0x1/0x2/P/-/-/0\n").unwrap_err();
        assert!(e.message.contains("not followed"), "{e}");
        let e = PerfScript::parse("\t40113g\n 0x1/0x2/P/-/-/0\n").unwrap_err();
        assert!(e.message.contains("not hex"), "{e}");
    }

    #[test]
    fn rejects_malformed_lines() {
        let e = PerfScript::parse("zz 0x1/0x2/P/-/-/0\n").unwrap_err();
        assert!(e.message.contains("not hex"), "{e}");
        let e = PerfScript::parse("10 1/0x2/P/-/-/0\n").unwrap_err();
        assert!(e.message.contains("0x prefix"), "{e}");
        let e = PerfScript::parse("2\n3\n10 0x1/0x2\n").unwrap_err();
        assert_eq!(e.line, 1);
        let e = PerfScript::parse("10 0x1/0x2\n5\n").unwrap_err();
        assert!(e.message.contains("end of file"), "{e}");
        let e = PerfScript::parse("PERF_RECORD_MMAP2 1/1: [0x1000(0x10) @ 0x0 08:01]: r-xp /x\n")
            .unwrap_err();
        assert!(e.message.contains("PGOFF"), "{e}");
    }
}
