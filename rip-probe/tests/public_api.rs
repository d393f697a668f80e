//! rip-probe's public API is what `tests/public-api.txt` lists: adding,
//! removing or changing a public item fails this test until the list is
//! updated on purpose (`RIP_BLESS=1 cargo test -p rip-probe --test
//! public_api` rewrites it; review the diff).
//!
//! The list is read from the sources with syn, starting at lib.rs: the
//! items of `pub mod`s (recursively), the items re-exported by `pub use`
//! (found where they are defined), the public fields and variants of
//! public types, the `pub` methods of their inherent impls (wherever the
//! impl is), and the trait impls in public modules. `pub(crate)` is not
//! public. (rustdoc's JSON would be exact but needs a nightly build of
//! the whole crate; the sources are where visibility is written.)

use std::collections::{BTreeMap, BTreeSet};

use quote::ToTokens;

#[path = "common/source.rs"]
mod source;

fn is_pub(v: &syn::Visibility) -> bool {
    matches!(v, syn::Visibility::Public(_))
}

fn tokens(t: &impl ToTokens) -> String {
    t.to_token_stream().to_string()
}

/// Describes a module-level item as public API lines under `path`.
fn item_lines(path: &str, item: &syn::Item, out: &mut BTreeSet<String>) {
    match item {
        syn::Item::Fn(f) if is_pub(&f.vis) => {
            out.insert(format!("fn {path}::{}", tokens(&f.sig)));
        }
        syn::Item::Struct(s) if is_pub(&s.vis) => {
            let name = format!("{path}::{}", s.ident);
            out.insert(format!("struct {name}{}", tokens(&s.generics)));
            for (i, f) in s.fields.iter().enumerate() {
                if is_pub(&f.vis) {
                    let field = f.ident.as_ref().map_or(i.to_string(), |i| i.to_string());
                    out.insert(format!("field {name}.{field}: {}", tokens(&f.ty)));
                }
            }
        }
        syn::Item::Enum(e) if is_pub(&e.vis) => {
            let name = format!("{path}::{}", e.ident);
            out.insert(format!("enum {name}{}", tokens(&e.generics)));
            for v in &e.variants {
                // Field names and types only: doc comments are not API.
                let fields: Vec<String> = v
                    .fields
                    .iter()
                    .map(|f| match &f.ident {
                        Some(i) => format!("{i}: {}", tokens(&f.ty)),
                        None => tokens(&f.ty),
                    })
                    .collect();
                let fields = match &v.fields {
                    syn::Fields::Named(_) => format!(" {{ {} }}", fields.join(", ")),
                    syn::Fields::Unnamed(_) => format!("({})", fields.join(", ")),
                    syn::Fields::Unit => String::new(),
                };
                out.insert(format!("variant {name}::{}{fields}", v.ident));
            }
        }
        syn::Item::Trait(t) if is_pub(&t.vis) => {
            let name = format!("{path}::{}", t.ident);
            out.insert(format!("trait {name}"));
            for i in &t.items {
                if let syn::TraitItem::Fn(f) = i {
                    out.insert(format!("trait fn {name}::{}", tokens(&f.sig)));
                }
            }
        }
        syn::Item::Const(c) if is_pub(&c.vis) => {
            out.insert(format!("const {path}::{}: {}", c.ident, tokens(&c.ty)));
        }
        syn::Item::Static(s) if is_pub(&s.vis) => {
            out.insert(format!("static {path}::{}: {}", s.ident, tokens(&s.ty)));
        }
        syn::Item::Type(t) if is_pub(&t.vis) => {
            out.insert(format!("type {path}::{} = {}", t.ident, tokens(&t.ty)));
        }
        _ => {}
    }
}

fn item_name(item: &syn::Item) -> Option<String> {
    Some(match item {
        syn::Item::Fn(f) => f.sig.ident.to_string(),
        syn::Item::Struct(s) => s.ident.to_string(),
        syn::Item::Enum(e) => e.ident.to_string(),
        syn::Item::Trait(t) => t.ident.to_string(),
        syn::Item::Const(c) => c.ident.to_string(),
        syn::Item::Static(s) => s.ident.to_string(),
        syn::Item::Type(t) => t.ident.to_string(),
        _ => return None,
    })
}

/// Flattens a `use` tree to (source path, exported name) pairs.
fn flatten(prefix: &mut Vec<String>, t: &syn::UseTree, out: &mut Vec<(Vec<String>, String)>) {
    match t {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten(prefix, &p.tree, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut v = prefix.clone();
            v.push(n.ident.to_string());
            out.push((v, n.ident.to_string()));
        }
        syn::UseTree::Rename(r) => {
            let mut v = prefix.clone();
            v.push(r.ident.to_string());
            out.push((v, r.rename.to_string()));
        }
        syn::UseTree::Glob(_) => out.push((prefix.clone(), "*".into())),
        syn::UseTree::Group(g) => g.items.iter().for_each(|i| flatten(prefix, i, out)),
    }
}

fn public_api() -> Vec<String> {
    let files = source::library();
    let by_module: BTreeMap<Vec<String>, &syn::File> =
        files.iter().map(|f| (f.module.clone(), &f.file)).collect();
    let mut out = BTreeSet::new();
    let mut types = BTreeSet::new();
    // Public modules, from the root.
    let mut todo = vec![Vec::<String>::new()];
    while let Some(m) = todo.pop() {
        let Some(file) = by_module.get(&m) else {
            continue;
        };
        let path = std::iter::once("rip_probe".to_string())
            .chain(m.iter().cloned())
            .collect::<Vec<_>>()
            .join("::");
        for item in &file.items {
            item_lines(&path, item, &mut out);
            match item {
                syn::Item::Mod(md) if is_pub(&md.vis) => {
                    out.insert(format!("mod {path}::{}", md.ident));
                    let mut child = m.clone();
                    child.push(md.ident.to_string());
                    todo.push(child);
                }
                syn::Item::Use(u) if is_pub(&u.vis) => {
                    let mut pairs = Vec::new();
                    flatten(&mut Vec::new(), &u.tree, &mut pairs);
                    for (src, name) in pairs {
                        out.insert(format!("use {path}::{name} = {}", src.join("::")));
                        // The item itself, where it is defined.
                        let (def_mod, def_name) = src.split_at(src.len() - 1);
                        let mut def = m.clone();
                        let mut rest = def_mod;
                        if rest.first().is_some_and(|s| s == "crate") {
                            def.clear();
                            rest = &rest[1..];
                        }
                        def.extend(rest.iter().cloned());
                        if let Some(f) = by_module.get(&def) {
                            for it in &f.items {
                                if item_name(it).as_deref() == Some(&def_name[0]) {
                                    item_lines(&path, it, &mut out);
                                    types.insert(def_name[0].clone());
                                }
                            }
                        }
                    }
                }
                syn::Item::Impl(i) if i.trait_.is_some() => {
                    let (_, tr, _) = i.trait_.as_ref().unwrap();
                    out.insert(format!(
                        "impl {} for {} (in {path})",
                        tokens(tr),
                        tokens(&i.self_ty)
                    ));
                }
                _ => {}
            }
            if let Some(n) = item_name(item) {
                types.insert(n);
            }
        }
    }
    // Inherent methods of public types, wherever the impl is.
    let public_types: BTreeSet<String> = out
        .iter()
        .filter_map(|l| {
            let rest = l
                .strip_prefix("struct ")
                .or_else(|| l.strip_prefix("enum "))?;
            let name = rest.split('<').next()?.rsplit("::").next()?;
            Some(name.trim_matches(['{', '}']).to_string())
        })
        .collect();
    for f in &files {
        for item in &f.file.items {
            let syn::Item::Impl(i) = item else { continue };
            if i.trait_.is_some() {
                continue;
            }
            let ty = tokens(&i.self_ty);
            if !public_types.contains(ty.split(' ').next().unwrap_or_default()) {
                continue;
            }
            for ii in &i.items {
                if let syn::ImplItem::Fn(m) = ii
                    && is_pub(&m.vis)
                {
                    out.insert(format!("method {ty}: {}", tokens(&m.sig)));
                }
            }
        }
    }
    let _ = types;
    out.into_iter().collect()
}

const SNAPSHOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/public-api.txt");

#[test]
fn the_public_api_is_the_committed_list() {
    let got = public_api().join("\n") + "\n";
    if std::env::var("RIP_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(SNAPSHOT, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(SNAPSHOT).unwrap_or_default();
    let (g, w): (BTreeSet<&str>, BTreeSet<&str>) = (got.lines().collect(), want.lines().collect());
    let added: Vec<_> = g.difference(&w).collect();
    let removed: Vec<_> = w.difference(&g).collect();
    assert!(
        added.is_empty() && removed.is_empty(),
        "the public API changed (if on purpose: RIP_BLESS=1 cargo test -p rip-probe --test public_api)\nadded: {added:#?}\nremoved: {removed:#?}"
    );
}

/// The walk sees the API: the session, the report and the lower-level
/// probe are in it, and a crate-private stage is not.
#[test]
fn the_list_holds_the_api_and_nothing_private() {
    let api = public_api();
    let has = |s: &str| api.iter().any(|l| l.contains(s));
    assert!(has("use rip_probe::Session = session::Session"), "{api:#?}");
    assert!(has("struct rip_probe::model::Report"));
    assert!(has("method KernelProbe: fn attach ("));
    assert!(has(
        "variant rip_probe::collect::kernel::Error::NotPrivileged"
    ));
    assert!(has(
        "variant rip_probe::discover::Error::NoSuchProcess(u32)"
    ));
    assert!(!has("correlate"), "correlate is crate-private");
    assert!(!has("ProcLookup"));
}
