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
    ("alloc", 0),
    ("panic", 0),
    ("host", 0),
    ("quiet", 0),
    ("census", 0),
    ("paired", 0),
    ("modules", 1),
    ("exec_map", 1),
    ("buffer", 1),
    ("decode", 2),
    ("emulate", 2),
    ("trace", 3),
    ("unwind", 3),
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

/// `PREFIX::NAME` paths in `text` for each `prefix` given, NAME a module
/// name (lower case and underscores).
fn names_after<'t>(text: &'t str, prefix: &str) -> Vec<&'t str> {
    text.match_indices(prefix)
        .map(|(i, _)| {
            let rest = &text[i + prefix.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

/// A cycle in the graph of `edges`, if there is one (depth first).
fn cycle(edges: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, Vec<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), 1);
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            match state.get(next.as_str()) {
                Some(1) => {
                    let from = path.iter().position(|p| p == next).unwrap();
                    let mut found = path[from..].to_vec();
                    found.push(next.clone());
                    return Some(found);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(next, edges, state, path) {
                        return Some(c);
                    }
                }
            }
        }
        path.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in edges.keys() {
        if !state.contains_key(node.as_str()) {
            if let Some(c) = visit(node, edges, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// The files of one directory, as modules that name each other by
/// `prefixes` (`super::` from a sibling, `crate::ROOM::` from anywhere).
fn file_graph(dir: &Path, prefixes: &[&str]) -> BTreeMap<String, Vec<String>> {
    let stems: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|s| !matches!(s.as_str(), "mod" | "lib" | "main"))
        .collect();
    let mut edges = BTreeMap::new();
    for stem in &stems {
        let text = std::fs::read_to_string(dir.join(format!("{stem}.rs"))).unwrap();
        // Unit tests may reach anywhere.
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        let mut named: Vec<String> = prefixes
            .iter()
            .flat_map(|p| names_after(text, p))
            .filter(|n| *n != stem && stems.iter().any(|s| s == n))
            .map(str::to_string)
            .collect();
        named.sort();
        named.dedup();
        edges.insert(stem.clone(), named);
    }
    edges
}

/// Within a room, and in profiler-ctl, files import each other one way:
/// no circle of files (ARCHITECTURE.md, "Floors").
#[test]
fn no_circle_of_files_within_a_room_or_in_profiler_ctl() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    for entry in std::fs::read_dir(root.join("src")).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        let room = dir.file_name().unwrap().to_string_lossy().into_owned();
        let graph = file_graph(&dir, &["super::", &format!("crate::{room}::")]);
        checked += graph.len();
        if let Some(c) = cycle(&graph) {
            panic!("src/{room}: a circle of imports: {}", c.join(" -> "));
        }
    }
    let ctl = root.join("profiler-ctl/src");
    let graph = file_graph(&ctl, &["crate::"]);
    checked += graph.len();
    if let Some(c) = cycle(&graph) {
        panic!("profiler-ctl/src: a circle of imports: {}", c.join(" -> "));
    }
    assert!(checked > 30, "only {checked} files read");
}
