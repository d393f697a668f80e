//! `--uprobe PATTERN`: for programs built without librip, attach the
//! `fn_entry` uprobe to every function of the target matching a glob, so
//! each thread's "last function entered" stands in for its ring.
//!
//! `PATTERN` matches function names (demangled, and as stored) in the
//! target's executable; `LIB:PATTERN` matches in a mapped shared library
//! whose file name contains `LIB` (e.g. `libc:pthread_mutex_*`).

use std::{
    num::NonZeroU32,
    ops::ControlFlow,
    path::{Path, PathBuf},
};

use aya::{
    Ebpf,
    programs::{UProbe, uprobe::UProbeScope},
};
use blazesym::{
    SymType,
    inspect::{Inspector, source::Elf, source::Source},
};
use rip_ebpf::names;

use super::{Error, ProgramOp};
use crate::{collect::Result, discover::Lacks};

/// More probes than this would make attaching slow and the target slower
/// (each hit costs tens of microseconds): ask for a narrower pattern.
pub const MAX_PROBES: usize = 2000;

/// A function chosen for probing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeSite {
    /// The binary holding it, as a path that reaches the very file the
    /// target mapped from here: `/proc/PID/exe`, `/proc/PID/map_files/…`,
    /// or its path (inside `/proc/PID/root` in another mount namespace).
    pub binary: PathBuf,
    /// The binary's path as the process's maps name it (its own mount
    /// namespace's).
    pub mapped: PathBuf,
    /// Its name as stored in the binary.
    pub name: String,
    /// Offset in the file (what the kernel attaches to).
    pub file_offset: u64,
}

/// Splits `LIB:PATTERN` into the binary to search and the glob. The
/// binary is returned twice: as a path that reaches the mapped file from
/// here (which the kernel resolves at attach; the process may live in
/// another mount namespace, where its paths are not ours), and as the
/// process names it, for messages.
fn target_binary(pid: u32, spec: &str) -> Result<(PathBuf, PathBuf, String)> {
    const WHAT: Lacks = Lacks::UprobeFunctions;
    let spec_shown = cut(spec);
    match spec.split_once(':') {
        Some((lib, pat)) if !lib.is_empty() => {
            let maps_path = format!("/proc/{pid}/maps");
            let maps = std::fs::read_to_string(&maps_path)
                .map_err(|e| crate::discover::unreadable(pid, &maps_path, e, WHAT))?;
            let lib_shown = cut(lib);
            // librip's maps parser: paths may hold spaces, and pseudo-files
            // (`[vdso]`, deleted files) are not files.
            let maps = librip::reader::parse_maps(&maps);
            let found = maps
                .iter()
                .find(|m| {
                    m.file()
                        .and_then(Path::file_name)
                        .is_some_and(|f| f.to_string_lossy().contains(lib))
                })
                .ok_or_else(|| Error::NoSuchLibrary {
                    spec: spec_shown.to_string(),
                    pid,
                    lib: lib_shown.to_string(),
                })?;
            let shown = PathBuf::from(&found.name);
            let reach = crate::collect::procfs::code_path(pid, found).ok_or_else(|| {
                Error::Unreachable {
                    spec: spec_shown.to_string(),
                    binary: shown.clone(),
                }
            })?;
            Ok((reach, shown, pat.to_string()))
        }
        _ => {
            let link = format!("/proc/{pid}/exe");
            let exe = std::fs::read_link(&link)
                .map_err(|e| crate::discover::unreadable(pid, &link, e, WHAT))?;
            // The link itself reaches the executable in any mount namespace.
            Ok((
                PathBuf::from(format!("/proc/{pid}/exe")),
                exe,
                spec.to_string(),
            ))
        }
    }
}

/// The functions of the target matching `spec`.
pub fn resolve(pid: u32, spec: &str) -> Result<Vec<ProbeSite>> {
    let (binary, shown, pattern) = target_binary(pid, spec)?;
    let (spec, pattern_shown) = (cut(spec), cut(&pattern));
    let glob = glob::Pattern::new(&pattern).map_err(|source| Error::BadPattern {
        spec: spec.to_string(),
        source,
    })?;
    // The ELF symbol tables (.symtab, else .dynsym in a stripped binary:
    // a distribution's programs export their functions there), not DWARF:
    // a binary without debug information still has its functions listed.
    let mut elf = Elf::new(&binary);
    elf.debug_syms = false;
    let src = Source::Elf(elf);
    let mut sites = Vec::new();
    // Every function's short name, for the "no match" error's suggestions.
    let mut all = Vec::new();
    Inspector::new()
        .for_each(&src, |s| {
            if s.sym_type == SymType::Function
                && s.addr != 0
                && let Some(off) = s.file_offset
            {
                let demangled = rustc_demangle::demangle(&s.name).to_string();
                // `{:#}` drops the hash suffix of Rust symbols.
                let short = format!("{:#}", rustc_demangle::demangle(&s.name));
                all.push(short.clone());
                if glob.matches(&s.name) || glob.matches(&demangled) || glob.matches(&short) {
                    sites.push(ProbeSite {
                        binary: binary.clone(),
                        mapped: shown.clone(),
                        name: s.name.to_string(),
                        file_offset: off,
                    });
                }
            }
            ControlFlow::Continue(())
        })
        .map_err(|e| Error::Symbols {
            binary: shown.clone(),
            why: symbols_error(&binary, &e.to_string()),
        })?;
    sites.sort_by_key(|s| s.file_offset);
    sites.dedup_by_key(|s| s.file_offset);
    if sites.is_empty() {
        let names: Vec<&str> = all.iter().map(String::as_str).collect();
        let near = super::near_names::nearest(&pattern, &names, 5);
        return Err(Error::NoMatch {
            spec: spec.to_string(),
            binary: shown,
            pattern: pattern_shown.to_string(),
            near: near.into_iter().map(str::to_string).collect(),
        }
        .into());
    }
    if sites.len() > MAX_PROBES {
        return Err(Error::TooManyMatches {
            spec: spec.to_string(),
            count: sites.len(),
            max: MAX_PROBES,
        }
        .into());
    }
    Ok(sites)
}

/// The symbol-table reader's error `e` about `binary`, with the name it
/// means filled in: it says "symbol name `{bytes:?}` is invalid" without
/// the name (the placeholder is left in its text).
fn symbols_error(binary: &Path, e: &str) -> String {
    const PLACEHOLDER: &str = "`{bytes:?}`";
    if !e.contains(PLACEHOLDER) {
        return e.to_string();
    }
    let name = std::fs::read(binary)
        .ok()
        .and_then(|data| invalid_symbol_name(&data))
        .unwrap_or_else(|| "(not found again)".into());
    e.replace(PLACEHOLDER, &format!("`{name}` (not UTF-8)"))
}

/// The first symbol name of an ELF file that is not UTF-8, escaped and
/// cut for a message.
pub(crate) fn invalid_symbol_name(data: &[u8]) -> Option<String> {
    use object::{Object, ObjectSymbol};
    let file = object::File::parse(data).ok()?;
    let bad = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter_map(|s| s.name_bytes().ok())
        .find(|n| std::str::from_utf8(n).is_err())?;
    Some(cut(&bad.escape_ascii().to_string()))
}

/// `text` for an error message: whole if short, else its start and its
/// length (a pasted page is not echoed back).
pub(crate) fn cut(text: &str) -> String {
    const KEEP: usize = 60;
    let n = text.chars().count();
    if n <= KEEP + 20 {
        return text.to_string();
    }
    let head: String = text.chars().take(KEEP).collect();
    format!("{head}… ({n} characters)")
}

/// Loads `fn_entry` and attaches it to every site, firing only for `pid`.
pub fn attach(ebpf: &mut Ebpf, pid: u32, sites: &[ProbeSite]) -> Result<()> {
    let prog: &mut UProbe = super::program(ebpf, names::FN_ENTRY)?;
    prog.load()
        .map_err(|e| Error::program(ProgramOp::Load, "fn_entry", e))?;
    // The kernel refuses an event on an exited thread: once the leader
    // exited, a live thread names the process (uprobes filter by its memory).
    let scoped = crate::discover::view_pid(pid);
    let scope = UProbeScope::OneProcess(
        NonZeroU32::new(scoped).ok_or(crate::discover::Error::NoSuchProcess(pid))?,
    );
    for s in sites {
        prog.attach(s.file_offset, &s.binary, scope)
            .map_err(|e| super::privileges::uprobe_error(format!("a uprobe to {}", s.name), e))?;
    }
    Ok(())
}
