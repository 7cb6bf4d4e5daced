//! Reading the perf.script the library writes (DESIGN.md, "Output
//! formats"): `PERF_RECORD_MMAP2` lines, then one line per distinct trace,
//! newest branch first, after its repeat count when above one.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// An executable file mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub len: u64,
    pub pgoff: u64,
    /// `x` in its permissions (the tracer lists executable mappings only).
    pub executable: bool,
    pub path: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Branch {
    pub from: u64,
    pub to: u64,
}

/// A distinct trace and how often it was recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    pub count: u64,
    /// Oldest branch first.
    pub execution_order: Vec<Branch>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerfScript {
    pub mappings: Vec<Mapping>,
    pub traces: Vec<Trace>,
}

fn hex(text: &str) -> Option<u64> {
    u64::from_str_radix(text.strip_prefix("0x").unwrap_or(text), 16).ok()
}

/// `PERF_RECORD_MMAP2 PID/TID: [0xSTART(0xLEN) @ 0xPGOFF MAJ:MIN INODE GEN]: PERMS PATH`
fn mapping(line: &str) -> Option<Mapping> {
    let (_, rest) = line.split_once('[')?;
    let (start, rest) = rest.split_once('(')?;
    let (len, rest) = rest.split_once(')')?;
    let pgoff = rest
        .trim_start()
        .strip_prefix('@')?
        .split_whitespace()
        .next()?;
    let (_, tail) = rest.split_once("]:")?;
    let mut words = tail.split_whitespace();
    let perms = words.next()?;
    let path = words.collect::<Vec<_>>().join(" ");
    Some(Mapping {
        start: hex(start)?,
        len: hex(len)?,
        pgoff: hex(pgoff)?,
        executable: perms.as_bytes().get(2) == Some(&b'x'),
        path: PathBuf::from(path),
    })
}

impl PerfScript {
    pub fn parse(text: &str) -> Result<PerfScript> {
        let mut script = PerfScript::default();
        let mut repeat = 1;
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            let bad = || format!("line {}: '{line}' is not perf.script", number + 1);
            if line.is_empty() {
                continue;
            }
            if line.starts_with("PERF_RECORD_MMAP2") {
                script.mappings.push(mapping(line).with_context(bad)?);
            } else if line.bytes().all(|b| b.is_ascii_digit()) {
                repeat = line.parse().with_context(bad)?;
            } else {
                let mut newest_first = Vec::new();
                for entry in line.split_whitespace().skip(1) {
                    let mut fields = entry.split('/');
                    let (Some(from), Some(to)) =
                        (fields.next().and_then(hex), fields.next().and_then(hex))
                    else {
                        bail!("{}", bad());
                    };
                    newest_first.push(Branch { from, to });
                }
                newest_first.reverse();
                script.traces.push(Trace {
                    count: repeat,
                    execution_order: newest_first,
                });
                repeat = 1;
            }
        }
        Ok(script)
    }

    pub fn read(path: &Path) -> Result<PerfScript> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        PerfScript::parse(&text).with_context(|| path.display().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_counts_and_order_are_read() {
        let text = "PERF_RECORD_MMAP2 77/77: [0x5500001000(0x2000) @ 0x1000 fd:01 42 0]: r-xp /bin/my prog\n\
                    3\n\
                    5500001130 0x5500001150/0x5500001130/P/-/-/0 0x5500001140/0x5500001100/P/-/-/0\n\
                    7f00 0x1/0x2/P/-/-/0\n";
        let s = PerfScript::parse(text).unwrap();
        assert_eq!(
            s.mappings,
            [Mapping {
                start: 0x55_0000_1000,
                len: 0x2000,
                pgoff: 0x1000,
                executable: true,
                path: "/bin/my prog".into()
            }]
        );
        assert_eq!(s.traces[0].count, 3);
        assert_eq!(
            s.traces[0].execution_order[0],
            Branch {
                from: 0x55_0000_1140,
                to: 0x55_0000_1100
            }
        );
        assert_eq!(s.traces[1].count, 1);
        assert!(PerfScript::parse("12 0xzz/0x1/P\n")
            .unwrap_err()
            .to_string()
            .contains("line 1"));
    }
}
