//! The AutoFDO text format `create_llvm_prof --profiler=text` reads: three
//! sections, each a decimal record count then the records, all three always
//! present — ranges `BEGIN-END:COUNT`, addresses `ADDR:COUNT`, branches
//! `FROM->TO:COUNT` — hex without `0x`, module-relative offsets.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::{Branch, ParseError};

/// One module's AutoFDO text profile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AfdoProfile {
    /// (begin, end) -> count; `end` is the branch that leaves the range.
    pub ranges: BTreeMap<(u64, u64), u64>,
    /// Sampled addresses -> count.
    pub addresses: BTreeMap<u64, u64>,
    /// Taken branches -> count.
    pub branches: BTreeMap<Branch, u64>,
}

impl AfdoProfile {
    /// The ranges as [`crate::overlap::Range`] values.
    pub fn range_list(&self) -> Vec<crate::overlap::Range> {
        self.ranges
            .iter()
            .map(|(&(begin, end), &count)| crate::overlap::Range { begin, end, count })
            .collect()
    }

    /// The text `create_llvm_prof --profiler=text` reads.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = writeln!(out, "{}", self.ranges.len());
        for ((b, e), c) in &self.ranges {
            let _ = writeln!(out, "{b:x}-{e:x}:{c}");
        }
        let _ = writeln!(out, "{}", self.addresses.len());
        for (a, c) in &self.addresses {
            let _ = writeln!(out, "{a:x}:{c}");
        }
        let _ = writeln!(out, "{}", self.branches.len());
        for (e, c) in &self.branches {
            let _ = writeln!(out, "{:x}->{:x}:{c}", e.from, e.to);
        }
        out
    }
}

/// Reads and parses an AutoFDO text file.
pub fn parse_file(path: &Path) -> Result<AfdoProfile, ParseError> {
    let text = std::fs::read_to_string(path).map_err(|e| ParseError::io("afdo", path, e))?;
    parse(&text).map_err(|e| e.in_file(path))
}

/// Parses AutoFDO text. Repeated records are summed.
pub fn parse(text: &str) -> Result<AfdoProfile, ParseError> {
    let mut profile = AfdoProfile::default();
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
    for section in ["ranges", "addresses", "branches"] {
        let (line_no, header) = lines
            .next()
            .ok_or_else(|| ParseError::new("afdo", 0, format!("missing {section} section")))?;
        let err = |m: String| ParseError::new("afdo", line_no, m);
        let n: usize = header.parse().map_err(|_| {
            err(format!(
                "{section} count '{header}' is not a decimal number"
            ))
        })?;
        for _ in 0..n {
            let (line_no, record) = lines.next().ok_or_else(|| {
                ParseError::new(
                    "afdo",
                    0,
                    format!("{section} section ends early: {n} records"),
                )
            })?;
            let err = |m: String| ParseError::new("afdo", line_no, m);
            let (key, count) = record
                .rsplit_once(':')
                .ok_or_else(|| err(format!("no ':COUNT' in '{record}'")))?;
            let count: u64 = count
                .parse()
                .map_err(|_| err(format!("bad count in '{record}'")))?;
            let hex = |t: &str| {
                u64::from_str_radix(t, 16)
                    .map_err(|_| err(format!("'{t}' is not hex in '{record}'")))
            };
            match section {
                "ranges" => {
                    let (b, e) = key
                        .split_once('-')
                        .ok_or_else(|| err(format!("no '-' in '{record}'")))?;
                    *profile.ranges.entry((hex(b)?, hex(e)?)).or_insert(0) += count;
                }
                "addresses" => *profile.addresses.entry(hex(key)?).or_insert(0) += count,
                _ => {
                    let (f, t) = key
                        .split_once("->")
                        .ok_or_else(|| err(format!("no '->' in '{record}'")))?;
                    let edge = Branch {
                        from: hex(f)?,
                        to: hex(t)?,
                    };
                    *profile.branches.entry(edge).or_insert(0) += count;
                }
            }
        }
    }
    if let Some((line_no, extra)) = lines.find(|(_, l)| !l.is_empty()) {
        return Err(ParseError::new(
            "afdo",
            line_no,
            format!("unexpected text after the branches section: '{extra}'"),
        ));
    }
    Ok(profile)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let text = "2\n1130-1150:7\n1160-1170:2\n1\n1140:3\n1\n1150->1130:5\n";
        let p = parse(text).unwrap();
        assert_eq!(p.ranges[&(0x1130, 0x1150)], 7);
        assert_eq!(p.addresses[&0x1140], 3);
        assert_eq!(
            p.branches[&Branch {
                from: 0x1150,
                to: 0x1130
            }],
            5
        );
        assert_eq!(p.to_text(), text);
        assert_eq!(p.range_list().len(), 2);
    }

    #[test]
    fn empty_sections_are_zero() {
        let p = parse("0\n0\n0\n").unwrap();
        assert_eq!(p, AfdoProfile::default());
        assert_eq!(p.to_text(), "0\n0\n0\n");
    }

    #[test]
    fn rejects_malformed_text() {
        assert!(parse("1\n").unwrap_err().message.contains("ends early"));
        assert!(parse("0\n0\n")
            .unwrap_err()
            .message
            .contains("missing branches"));
        let e = parse("1\n10-zz:1\n0\n0\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(parse("x\n").unwrap_err().message.contains("not a decimal"));
        assert!(parse("0\n0\n0\njunk\n")
            .unwrap_err()
            .message
            .contains("after the branches"));
    }
}
