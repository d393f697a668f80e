//! rip-probe's own sources, parsed with syn, for the architecture and
//! public-API checks.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// One source file of the library: its module path (`["render", "text"]`
/// for src/render/text.rs, `["collect", "kernel"]` for
/// src/collect/kernel/mod.rs) and its parsed contents.
pub struct SourceFile {
    pub module: Vec<String>,
    pub file: syn::File,
}

/// Every `.rs` file of rip-probe's library (not main.rs).
pub fn library() -> Vec<SourceFile> {
    crate_sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), "lib.rs")
}

/// Every `.rs` file of the crate whose sources are in `src`, `root`
/// (`lib.rs` or `main.rs`) being its root module; the other crate roots
/// there (a library's main.rs, src/bin) are other crates, left out.
pub fn crate_sources(src: &Path, root: &str) -> Vec<SourceFile> {
    let mut out = Vec::new();
    walk(src, src, root, &mut out);
    out.sort_by(|a, b| a.module.cmp(&b.module));
    out
}

fn walk(root: &Path, dir: &Path, root_file: &str, out: &mut Vec<SourceFile>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p == root.join("bin") {
            continue;
        }
        if p.is_dir() {
            walk(root, &p, root_file, out);
            continue;
        }
        let top_root = ["lib.rs", "main.rs"].iter().any(|r| p == root.join(r));
        if p.extension().is_none_or(|e| e != "rs") || (top_root && p != root.join(root_file)) {
            continue;
        }
        let rel = p.strip_prefix(root).unwrap().with_extension("");
        let mut module: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if top_root || module.last().is_some_and(|m| m == "mod") {
            module.pop();
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        out.push(SourceFile { module, file });
    }
}

/// Every path a file names that starts with `crate`, `super` or `self`,
/// resolved to an absolute path from the crate root (`use` trees
/// flattened).
pub fn crate_paths(module: &[String], file: &syn::File) -> Vec<Vec<String>> {
    struct V {
        /// The module being read (the file's, then inline `mod`s).
        module: Vec<String>,
        out: Vec<Vec<String>>,
    }
    impl V {
        fn resolve(&mut self, segs: Vec<String>) {
            let Some(first) = segs.first() else { return };
            let mut base: Vec<String> = match first.as_str() {
                "crate" => Vec::new(),
                "self" | "super" => self.module.clone(),
                _ => return,
            };
            let mut rest = &segs[1..];
            if first == "super" {
                base.pop();
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            base.extend(rest.iter().cloned());
            self.out.push(base);
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
                    self.resolve(v);
                }
                syn::UseTree::Rename(r) => {
                    let mut v = prefix.clone();
                    v.push(r.ident.to_string());
                    self.resolve(v);
                }
                syn::UseTree::Glob(_) => self.resolve(prefix.clone()),
                syn::UseTree::Group(g) => g.items.iter().for_each(|i| self.tree(prefix, i)),
            }
        }
    }
    impl<'ast> Visit<'ast> for V {
        fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
            self.module.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.module.pop();
        }
        fn visit_path(&mut self, p: &'ast syn::Path) {
            self.resolve(p.segments.iter().map(|s| s.ident.to_string()).collect());
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
