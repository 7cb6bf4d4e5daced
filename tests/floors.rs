//! The library's floors (ARCHITECTURE.md, "Floors"): a module imports only
//! modules on its own floor or below, so that no two rooms import each
//! other. Read from the sources: every `crate::ROOM` path in a file of
//! `src/ROOM…` names a room, and the room's floor may not be lower.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Each room of `src/` and its floor, from the ground up.
const FLOORS: &[(&str, u32)] = &[
    ("sys", 0),
    ("sync", 0),
    ("panic", 0),
    ("host", 0),
    ("modules", 1),
    ("exec_map", 1),
    ("buffer", 1),
    ("decode", 2),
    ("emulate", 2),
    ("trace", 3),
    ("aggregate", 4),
    ("output", 4),
    ("control", 5),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `crate::NAME` paths in `text`, comments included (a doc link down is
/// harmless; one up would say something is wrong).
fn rooms_named(text: &str) -> Vec<&str> {
    text.match_indices("crate::")
        .map(|(i, _)| {
            let rest = &text[i + 7..];
            let end = rest
                .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

#[test]
fn every_import_points_down() {
    let floors: BTreeMap<&str, u32> = FLOORS.iter().copied().collect();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut rooms_seen = 0;
    let mut up = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let room = first.trim_end_matches(".rs");
        if room == "lib" {
            continue;
        }
        let floor = *floors.get(room).unwrap_or_else(|| {
            panic!("src/{room} is on no floor: add it to FLOORS and ARCHITECTURE.md")
        });
        rooms_seen += 1;
        let text = std::fs::read_to_string(file).unwrap();
        for named in rooms_named(&text) {
            if let Some(&f) = floors.get(named) {
                if f > floor {
                    up.push(format!(
                        "{} imports crate::{named} (floor {f} over {floor})",
                        rel.display()
                    ));
                }
            }
        }
    }
    assert!(
        rooms_seen > 20,
        "only {rooms_seen} source files read from {}",
        src.display()
    );
    assert!(up.is_empty(), "imports that point up:\n{}", up.join("\n"));
}
