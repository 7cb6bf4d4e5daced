//! values.csv: the value profile a session with `values` writes (one row
//! per load instruction), read by profiler-ctl and bench-harness.
//!
//! A header line, then one row per load instruction, most executed first:
//!
//! ```text
//! vaddr,executions,other,values,module
//! 0x1189,5120,0,0x7:4608 0x0:512,/usr/bin/prog
//! ```
//!
//! - `vaddr`: the instruction's ELF virtual address in its module (what
//!   addr2line and objdump take);
//! - `executions`: the loads recorded;
//! - `other`: executions whose value was not among the values counted
//!   exactly (a load that read more distinct values than the library
//!   keeps per instruction);
//! - `values`: `value:count` pairs in hex and decimal, most frequent
//!   first, space-separated (the value as read, zero-extended);
//! - `module`: the file's path, last, so that it may hold commas.

use std::path::PathBuf;

/// The file's name in the output directory.
pub const VALUES_FILE: &str = "values.csv";
/// Its header line.
pub const VALUES_HEADER: &str = "vaddr,executions,other,values,module";

/// One load instruction's row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadRow {
    pub module: PathBuf,
    pub vaddr: u64,
    pub executions: u64,
    pub other: u64,
    /// (value, count), most frequent first.
    pub values: Vec<(u64, u64)>,
}

impl LoadRow {
    /// The row's line, without its newline.
    pub fn to_line(&self) -> String {
        let values: Vec<String> = self
            .values
            .iter()
            .map(|(v, n)| format!("{v:#x}:{n}"))
            .collect();
        format!(
            "{:#x},{},{},{},{}",
            self.vaddr,
            self.executions,
            self.other,
            values.join(" "),
            self.module.display()
        )
    }

    /// The share of executions that read the most frequent value: the
    /// load's top-1 invariance. A lower bound when `other` exceeds that
    /// value's count (a value left uncounted might have been read more).
    pub fn invariance(&self) -> f64 {
        let top = self.values.first().map_or(0, |v| v.1);
        top as f64 / self.executions.max(1) as f64
    }

    /// Parses one row; the error names what is wrong with it.
    pub fn parse(line: &str) -> Result<LoadRow, String> {
        let mut f = line.splitn(5, ',');
        let mut next = |what: &str| {
            f.next()
                .ok_or_else(|| format!("the row has no {what} column: '{line}'"))
        };
        let vaddr = next("vaddr")?;
        let vaddr = u64::from_str_radix(vaddr.trim_start_matches("0x"), 16)
            .map_err(|_| format!("vaddr is not a hex address: '{vaddr}'"))?;
        let number = |what: &str, s: &str| {
            s.parse::<u64>()
                .map_err(|_| format!("{what} is not a count: '{s}'"))
        };
        let executions = number("executions", next("executions")?)?;
        let other = number("other", next("other")?)?;
        let mut values = Vec::new();
        for pair in next("values")?.split_whitespace() {
            let (v, n) = pair
                .split_once(':')
                .ok_or_else(|| format!("a value is not value:count: '{pair}'"))?;
            let v = u64::from_str_radix(v.trim_start_matches("0x"), 16)
                .map_err(|_| format!("a value is not hex: '{v}'"))?;
            values.push((v, number("a value's count", n)?));
        }
        let module = PathBuf::from(next("module")?);
        Ok(LoadRow {
            module,
            vaddr,
            executions,
            other,
            values,
        })
    }
}

/// Parses a whole values.csv; the error names the line.
pub fn parse_values(text: &str) -> Result<Vec<LoadRow>, String> {
    let mut lines = text.lines();
    match lines.next() {
        Some(VALUES_HEADER) => {}
        other => {
            return Err(format!(
                "line 1 is not the header '{VALUES_HEADER}': '{}'",
                other.unwrap_or("")
            ))
        }
    }
    lines
        .enumerate()
        .map(|(i, l)| LoadRow::parse(l).map_err(|e| format!("line {}: {e}", i + 2)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_read_back_with_commas_in_the_path() {
        let row = LoadRow {
            module: PathBuf::from("/opt/a,b/prog"),
            vaddr: 0x1189,
            executions: 10,
            other: 1,
            values: vec![(7, 8), (0, 1)],
        };
        let text = format!("{VALUES_HEADER}\n{}\n", row.to_line());
        assert_eq!(parse_values(&text).unwrap(), vec![row.clone()]);
        assert!((row.invariance() - 0.8).abs() < 1e-12);
    }

    #[test]
    fn a_bad_row_is_named() {
        let text = format!("{VALUES_HEADER}\n0x10,5,0,0x1:5,/p\n0x10,five,0,,/p\n");
        let e = parse_values(&text).unwrap_err();
        assert!(
            e.starts_with("line 3: executions is not a count: 'five'"),
            "{e}"
        );
        assert!(parse_values("vaddr\n").unwrap_err().starts_with("line 1"));
    }
}
