//! LLVM's text sample-profile format as create_llvm_prof 0.19 writes it,
//! repaired: that version sometimes writes the name of an inlined callee as
//! a dangling string (google/autofdo issue #95), random bytes that clang and
//! llvm-profdata refuse. The harness and the end-to-end tests both read
//! create_llvm_prof's output through [`sanitize_llvm_text`].

/// Removes the records create_llvm_prof 0.19 writes with corrupt function
/// names (google/autofdo issue #95: a dangling string for inlined callees,
/// so the text holds random bytes that clang and llvm-profdata refuse).
/// A record with a bad name is dropped with everything nested under it;
/// bad call-target tokens are dropped from body lines. Returns the cleaned
/// text and how many records were dropped.
pub fn sanitize_llvm_text(bytes: &[u8]) -> (String, usize) {
    fn valid(name: &str) -> bool {
        let mut chars = name.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '.')
            && chars.all(|c| c.is_ascii_alphanumeric() || "_.$".contains(c))
    }
    fn is_location(s: &str) -> bool {
        !s.is_empty()
            && s.split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    }
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(text.len());
    let mut dropped = 0;
    let mut skip_deeper_than: Option<usize> = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        if let Some(d) = skip_deeper_than {
            if indent > d {
                continue;
            }
            skip_deeper_than = None;
        }
        let body = &line[indent..];
        let keep = if indent == 0 {
            // FUNCTION:TOTAL:HEAD
            let mut parts = body.split(':');
            let name = parts.next().unwrap_or("");
            valid(name) && parts.count() == 2
        } else {
            match body.split_once(": ") {
                Some((loc, rest)) if is_location(loc) => {
                    let mut tokens = rest.split(' ').filter(|t| !t.is_empty());
                    match tokens.next() {
                        // LOCATION: COUNT [TARGET:COUNT ...]
                        Some(count) if count.bytes().all(|b| b.is_ascii_digit()) => {
                            let targets: Vec<&str> = tokens
                                .filter(|t| t.rsplit_once(':').is_some_and(|(n, _)| valid(n)))
                                .collect();
                            out.push_str(&line[..indent]);
                            out.push_str(loc);
                            out.push_str(": ");
                            out.push_str(count);
                            for t in targets {
                                out.push(' ');
                                out.push_str(t);
                            }
                            out.push('\n');
                            continue;
                        }
                        // LOCATION: CALLEE:TOTAL (an inlined callee)
                        _ => {
                            rest.trim().rsplit_once(':').is_some_and(|(n, c)| {
                                valid(n) && c.bytes().all(|b| b.is_ascii_digit())
                            }) && rest.starts_with(|c: char| c != ' ')
                        }
                    }
                }
                _ => false,
            }
        };
        if keep {
            out.push_str(line);
            out.push('\n');
        } else {
            dropped += 1;
            skip_deeper_than = Some(indent);
        }
    }
    (out, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrupt_records_are_dropped_with_their_nested_lines() {
        let text = b"main:100:1\n 1: 10\n 2: 5 foo:3 \xff\x01:2\n 3: \xf5(\x05]U:50\n  1: 50\n 4: bar:7\n  1: 7\n\x8b\x01:9:0\n 1: 9\nok:5:5\n 1: 5\n";
        let (clean, dropped) = sanitize_llvm_text(text);
        assert_eq!(
            clean,
            "main:100:1\n 1: 10\n 2: 5 foo:3\n 4: bar:7\n  1: 7\nok:5:5\n 1: 5\n"
        );
        assert_eq!(dropped, 2);
    }

    #[test]
    fn a_corrupt_callee_name_that_starts_with_a_digit_is_dropped() {
        // Seen from a real run: the dangling name began with the byte '0',
        // so the record looked like a body line whose count was "0\xd2...".
        let text = b"main:363414:0\n 1.1: 0\n 65521: 10667\n 1.1: 0\xd2\xe4\xad:0\n  2: 0\n 4: 7\n";
        let (clean, dropped) = sanitize_llvm_text(text);
        assert_eq!(clean, "main:363414:0\n 1.1: 0\n 65521: 10667\n 4: 7\n");
        assert_eq!(dropped, 1);
    }

    #[test]
    fn a_corrupt_callee_starting_with_a_nul_is_dropped_and_bad_targets_trimmed() {
        let mut text =
            b"main:194072:0\n 3.1: 5348\n 4: 5348 next_random:5348 \x01\xdf{:7\n".to_vec();
        text.extend_from_slice(b" 1.1: \x00\xdf{\xf7:0\n  2: 0\n  3: 1 warm:1\n 9: 149 cold:148\n");
        text.extend_from_slice(b"cold:3279:148\n 0: 148\n");
        let (clean, dropped) = sanitize_llvm_text(&text);
        assert_eq!(dropped, 1);
        assert_eq!(
            clean,
            "main:194072:0\n 3.1: 5348\n 4: 5348 next_random:5348\n 9: 149 cold:148\ncold:3279:148\n 0: 148\n"
        );
    }
}
