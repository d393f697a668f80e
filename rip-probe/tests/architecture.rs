//! The drawing of rip-probe's modules has no circles, and its floors are
//! the pipeline: each top-level module imports only modules on lower
//! floors, and no two files of one directory import each other in a ring.

use std::collections::{BTreeMap, BTreeSet};

#[path = "common/source.rs"]
mod source;

/// The floors, bottom up (lib.rs documents them). A module may use only
/// modules on lower floors; a new top-level module must be placed here.
const LAYERS: &[&[&str]] = &[
    &["util", "model"],
    &["discover"],
    &["collect"],
    // The stages below have errors of their own; `error` gathers them.
    &["correlate", "error"],
    &["window"],
    &["symbolize"],
    &["analyze"],
    &["render"],
    &["session"],
    &["commands"],
    &["cli"],
];

fn floor(top: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&top))
}

/// Module path → the module paths it uses (resolved to existing modules).
type Graph = BTreeMap<Vec<String>, BTreeSet<Vec<String>>>;

fn graph(files: &[(Vec<String>, syn::File)]) -> Graph {
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut g = Graph::new();
    for (m, f) in files {
        let uses = g.entry(m.clone()).or_default();
        for mut p in source::crate_paths(m, f) {
            // The longest prefix that is a module file.
            while !p.is_empty() && !modules.contains(&p) {
                p.pop();
            }
            if !p.is_empty() && &p != m {
                uses.insert(p);
            }
        }
    }
    g
}

/// What is wrong with the drawing: upward or unplaced top-level imports,
/// and rings among the files of one directory.
fn violations(files: &[(Vec<String>, syn::File)]) -> Vec<String> {
    let g = graph(files);
    let mut bad = Vec::new();
    // Floors, between top-level modules.
    for (m, uses) in &g {
        let Some(top) = m.first() else { continue };
        let Some(from) = floor(top) else {
            bad.push(format!("{top} is on no floor: add it to LAYERS"));
            continue;
        };
        for u in uses {
            let to = &u[0];
            if to == top {
                continue;
            }
            match floor(to) {
                Some(f) if f < from => {}
                _ => bad.push(format!(
                    "{} uses {} (up or across)",
                    m.join("::"),
                    u.join("::")
                )),
            }
        }
    }
    // Rings among siblings: files with the same parent module.
    let mut siblings: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (m, uses) in &g {
        let Some((name, parent)) = m.split_last() else {
            continue;
        };
        let edges = siblings
            .entry(parent.to_vec())
            .or_default()
            .entry(name.clone())
            .or_default();
        for u in uses {
            if u.len() > parent.len() && u.starts_with(parent) && &u[parent.len()] != name {
                edges.insert(u[parent.len()].clone());
            }
        }
    }
    for (parent, edges) in &siblings {
        if let Some(ring) = find_ring(edges) {
            bad.push(format!(
                "ring in crate::{}: {}",
                parent.join("::"),
                ring.join(" → ")
            ));
        }
    }
    bad
}

/// A cycle in `edges`, if any (depth-first search).
fn find_ring(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn dfs(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut ring = path[i..].to_vec();
            ring.push(n.to_string());
            return Some(ring);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for m in edges.get(n).into_iter().flatten() {
            if let Some(r) = dfs(m, edges, path, done) {
                return Some(r);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|n| dfs(n, edges, &mut Vec::new(), &mut done))
}

#[test]
fn imports_point_down_the_pipeline_without_circles() {
    let files: Vec<_> = source::library()
        .into_iter()
        .filter(|f| !f.module.is_empty())
        .map(|f| (f.module, f.file))
        .collect();
    assert!(files.len() > 20, "read the sources: {}", files.len());
    let bad = violations(&files);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

fn fake(files: &[(&str, &str)]) -> Vec<(Vec<String>, syn::File)> {
    files
        .iter()
        .map(|(m, src)| {
            (
                m.split("::").map(String::from).collect(),
                syn::parse_file(src).unwrap(),
            )
        })
        .collect()
}

/// The check fails where it should: an upward import, a module on no
/// floor, and two files of one directory using each other.
#[test]
fn the_check_catches_what_it_forbids() {
    let up = fake(&[
        ("model", "use crate::render::json;"),
        ("render", ""),
        ("render::json", ""),
    ]);
    assert_eq!(violations(&up), ["model uses render::json (up or across)"]);
    let nowhere = fake(&[("stray", "")]);
    assert_eq!(violations(&nowhere).len(), 1);
    let ring = fake(&[
        ("render", ""),
        ("render::text", "use super::tasks::section;"),
        ("render::tasks", "fn f() { crate::render::text::ids(); }"),
    ]);
    let bad = violations(&ring);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].starts_with("ring in crate::render"), "{bad:?}");
    // Tests' `use super::*` is the module itself, not an edge.
    let fine = fake(&[
        ("render", ""),
        (
            "render::text",
            "mod tests { use super::*; use crate::model::Report; }",
        ),
        ("model", ""),
    ]);
    assert!(violations(&fine).is_empty(), "{:?}", violations(&fine));
}
