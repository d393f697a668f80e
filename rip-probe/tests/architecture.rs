//! The drawing of the workspace's modules has no circles, and rip-probe's
//! floors are the pipeline: each top-level module imports only modules on
//! lower floors; analyze computes from what it is handed (no process
//! read, no symbolizer); and in no crate (rip-probe, librip, xtask) do two
//! files of one directory import each other in a ring.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

use syn::visit::Visit;

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

/// What is wrong with rip-probe's drawing: upward or unplaced top-level
/// imports, and rings among the files of one directory.
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
    bad.extend(rings(&g));
    bad
}

/// Rings among siblings: files with the same parent module that import
/// each other, directly or through others of them.
fn rings(g: &Graph) -> Vec<String> {
    let mut bad = Vec::new();
    let mut siblings: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (m, uses) in g {
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

/// What collect hands analyze: evidence, as data. analyze may name these
/// items of collect and no other (no reader, no module of it); a new kind
/// of evidence is added here on purpose.
const EVIDENCE: &[&str] = &[
    "collect::contention::ContentionEvidence",
    "collect::kernel::contention::Counted",
    "collect::kernel::contention::MAX_LOCKS",
    "collect::locks::LockEvidence",
    "collect::locks::LockReads",
    "collect::locks::SYS_FUTEX",
    "collect::locks::SYS_FUTEX_WAITV",
    "collect::locks::WAIT_KEY_ARGS",
    "collect::locks::WaitKey",
    "collect::leaks::Held",
    "collect::leaks::LeaksData",
    "collect::leaks::Table",
    "collect::offcpu::OffCpuData",
    "collect::ring::AllocEvidence",
    "collect::ring::Followed",
    "collect::runtime::python::GcState",
    "collect::runtime::python::GilState",
    "collect::runtime::python::locks::LockRead",
    "collect::runtime::python::locks::LockType",
    "collect::runtime::python::locks::LockWait",
    "collect::runtime::python::locks::PyLock",
    "collect::runtime::python::PyFrame",
    "collect::runtime::python::PyThread",
    "collect::runtime::python::Snapshot",
    "collect::stacks::threads::ThreadStacks",
    "collect::stacks::threads::UserStacks",
];

/// The modules of rip-probe analyze computes with.
const ANALYZE_USES: &[&str] = &["analyze", "model", "util", "error"];

/// The parts of the standard library that reach outside the program:
/// files (/proc), processes, the OS, the network, threads (sleeps), the
/// environment.
const STD_OUTSIDE: &[&str] = &["fs", "process", "os", "net", "thread", "env", "io"];

/// The crates analyze may name besides the standard library: the kernel
/// programs' record types and serde.
const ANALYZE_CRATES: &[&str] = &["rip_ebpf", "serde"];

/// Every path a file names outside its tests (`#[cfg(test)]` modules
/// build fixtures as they like), `use` trees flattened, `crate`, `self`
/// and `super` resolved to `crate::…` from `module`.
fn named_paths(module: &[String], file: &syn::File) -> Vec<Vec<String>> {
    struct V {
        module: Vec<String>,
        out: Vec<Vec<String>>,
    }
    impl V {
        fn push(&mut self, segs: Vec<String>) {
            let Some(first) = segs.first() else { return };
            if segs.len() == 1 && ["crate", "self", "super"].contains(&first.as_str()) {
                // `pub(crate)`, `pub(super)`: a visibility, not a use.
                return;
            }
            let resolved = match first.as_str() {
                "crate" => segs,
                "self" | "super" => {
                    let mut base = self.module.clone();
                    let mut rest = &segs[..];
                    if first == "self" {
                        rest = &rest[1..];
                    }
                    while rest.first().is_some_and(|s| s == "super") {
                        base.pop();
                        rest = &rest[1..];
                    }
                    let mut p = vec!["crate".to_string()];
                    p.extend(base);
                    p.extend(rest.iter().cloned());
                    p
                }
                _ => segs,
            };
            self.out.push(resolved);
        }
        fn tree(&mut self, prefix: &mut Vec<String>, t: &syn::UseTree) {
            match t {
                syn::UseTree::Path(p) => {
                    prefix.push(p.ident.to_string());
                    self.tree(prefix, &p.tree);
                    prefix.pop();
                }
                syn::UseTree::Name(n) => {
                    let mut v = prefix.clone();
                    if n.ident != "self" {
                        v.push(n.ident.to_string());
                    }
                    self.push(v);
                }
                syn::UseTree::Rename(r) => {
                    let mut v = prefix.clone();
                    v.push(r.ident.to_string());
                    self.push(v);
                }
                syn::UseTree::Glob(_) => self.push(prefix.clone()),
                syn::UseTree::Group(g) => g.items.iter().for_each(|i| self.tree(prefix, i)),
            }
        }
    }
    fn is_test(attrs: &[syn::Attribute]) -> bool {
        attrs.iter().any(|a| {
            a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
        })
    }
    impl<'ast> Visit<'ast> for V {
        fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
            if is_test(&m.attrs) {
                return;
            }
            self.module.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.module.pop();
        }
        fn visit_path(&mut self, p: &'ast syn::Path) {
            self.push(p.segments.iter().map(|s| s.ident.to_string()).collect());
            syn::visit::visit_path(self, p);
        }
        fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
            self.tree(&mut Vec::new(), &u.tree);
        }
    }
    let mut v = V {
        module: module.to_vec(),
        out: Vec::new(),
    };
    v.visit_file(file);
    v.out
}

/// rip-probe's dependencies, as Rust names them (`btf-rs` → `btf_rs`).
fn dependencies() -> BTreeSet<String> {
    let toml = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .expect("rip-probe/Cargo.toml");
    let mut out = BTreeSet::new();
    let mut in_deps = false;
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
        } else if in_deps
            && !line.starts_with('#')
            && let Some((name, _)) = line.split_once('=')
        {
            out.insert(name.trim().replace('-', "_"));
        }
    }
    out
}

/// What analyze names that it may not: a stage other than those it
/// computes with, an item of collect that is not evidence, the parts of
/// std that reach outside, another crate than `ANALYZE_CRATES`.
fn analyze_reads(files: &[(Vec<String>, syn::File)], crates: &BTreeSet<String>) -> Vec<String> {
    let mut bad = BTreeSet::new();
    for (m, f) in files.iter().filter(|(m, _)| m[0] == "analyze") {
        for p in named_paths(m, f) {
            let text = p.join("::");
            let ok = match p[0].as_str() {
                "crate" => {
                    let rest = p[1..].join("::");
                    p.len() > 1
                        && (ANALYZE_USES.contains(&p[1].as_str())
                            || EVIDENCE
                                .iter()
                                .any(|e| rest == *e || rest.starts_with(&format!("{e}::"))))
                }
                "std" | "core" | "alloc" => {
                    p.get(1).is_none_or(|s| !STD_OUTSIDE.contains(&s.as_str()))
                }
                c if crates.contains(c) => ANALYZE_CRATES.contains(&c),
                // A local name (a type, a variant, a function in scope).
                _ => true,
            };
            if !ok {
                bad.insert(format!("{} names {text}", m.join("::")));
            }
        }
    }
    bad.into_iter().collect()
}

#[test]
fn analyze_computes_from_what_it_is_handed() {
    let files: Vec<_> = source::library()
        .into_iter()
        .filter(|f| !f.module.is_empty())
        .map(|f| (f.module, f.file))
        .collect();
    let crates = dependencies();
    assert!(
        crates.contains("blazesym") && crates.contains("rip_ebpf"),
        "{crates:?}"
    );
    assert!(files.iter().filter(|(m, _)| m[0] == "analyze").count() > 5);
    let bad = analyze_reads(&files, &crates);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// librip's and xtask's files, like rip-probe's, import each other in no
/// ring.
#[test]
fn no_crate_of_the_workspace_has_circles() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (krate, root) in [("librip", "lib.rs"), ("xtask", "main.rs")] {
        let files: Vec<_> = source::crate_sources(&workspace.join(krate).join("src"), root)
            .into_iter()
            .map(|f| (f.module, f.file))
            .collect();
        assert!(files.len() > 5, "read {krate}'s sources: {}", files.len());
        let bad = rings(&graph(&files));
        assert!(bad.is_empty(), "{krate}: {}", bad.join("\n"));
    }
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

/// The analyze rule fails where it should: a reader of collect, a module
/// of it, the symbolizer, /proc through std, a crate that reads; and
/// passes evidence, the model, std's collections, a test's fixtures.
#[test]
fn the_analyze_rule_catches_what_it_forbids() {
    let crates: BTreeSet<String> = ["blazesym", "rip_ebpf", "libc"].map(String::from).into();
    let files = fake(&[
        (
            "analyze::waits",
            "use crate::collect::locks::{LockEvidence, tid_status};
             use super::super::collect::memory;
             use crate::symbolize::data::DataNames;
             use std::collections::HashMap;
             fn f() { let _ = std::fs::read_to_string(\"/proc/1/comm\"); libc::getpid(); }
             fn g(e: &crate::collect::locks::LockEvidence, r: rip_ebpf::TaskRecord) {}
             #[cfg(test)]
             mod tests { use crate::collect::locks::evidence; }",
        ),
        (
            "analyze::group",
            "use crate::model::Report; use super::waits;",
        ),
    ]);
    assert_eq!(
        analyze_reads(&files, &crates),
        [
            "analyze::waits names crate::collect::locks::tid_status",
            "analyze::waits names crate::collect::memory",
            "analyze::waits names crate::symbolize::data::DataNames",
            "analyze::waits names libc::getpid",
            "analyze::waits names std::fs::read_to_string",
        ]
    );
}

/// A ring among one directory's files is found in any crate, at its top
/// level too (librip's files sit beside its lib.rs).
#[test]
fn rings_are_found_at_a_crate_s_top_level() {
    let files = fake(&[
        ("reader", ""),
        ("reader::parse", "use super::original::Slot;"),
        ("reader::original", "use super::parse::words;"),
        ("format", "use crate::snap::X;"),
        ("snap", "use crate::format::Y;"),
    ]);
    let bad = rings(&graph(&files));
    assert_eq!(bad.len(), 2, "{bad:?}");
}
