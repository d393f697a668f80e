//! `--uprobe PATTERN`: for programs built without librip, attach the
//! `fn_entry` uprobe to every function of the target matching a glob, so
//! each thread's "last function entered" stands in for its ring.
//!
//! `PATTERN` matches function names (demangled, and as stored) in the
//! target's executable; `LIB:PATTERN` matches in a mapped shared library
//! whose file name contains `LIB` (e.g. `libc:pthread_mutex_*`).

use std::{
    io::IsTerminal,
    num::NonZeroU32,
    ops::ControlFlow,
    path::{Path, PathBuf},
    sync::{
        OnceLock,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use aya::{
    Ebpf,
    programs::{
        ProgramError, UProbe,
        uprobe::{UProbeLink, UProbeScope},
    },
    sys::SyscallError,
};
use blazesym::{
    SymType,
    inspect::{Inspector, source::Elf, source::Source},
};
use rip_ebpf::names;

use super::{
    Error, ProgramOp,
    uprobe_multi::{self, Bulk, MultiLink},
};
use crate::{collect::Result, discover::Lacks};

/// More probes than this would make attaching slow and the target slower
/// (each hit costs tens of microseconds): ask for a narrower pattern.
pub const MAX_PROBES: usize = 2000;

/// Uprobes attached one by one (a kernel without `uprobe_multi` links)
/// must all detach within this: each costs the kernel a grace period when
/// it is detached (under a lock, so detaching from several threads does
/// not overlap them), from about 7 ms (5.10) to 113 ms (6.1 PREEMPT_RT).
pub const DETACH_BUDGET: Duration = Duration::from_secs(2);

/// Up to this many uprobes one by one are attached without measuring
/// what one costs to detach: they detach within [`DETACH_BUDGET`] on every
/// kernel measured (16 × 113 ms on 6.1 PREEMPT_RT under emulation).
pub const UNMEASURED_SINGLE_PROBES: usize = 16;

/// Uprobes attached one by one and still held by this process (by every
/// [`OneByOne`]): the budget is for all of them.
static HELD_SINGLE: AtomicUsize = AtomicUsize::new(0);

/// The most uprobes held one by one, whatever their detach costs, as
/// `RIP_PROBE_ONE_BY_ONE_MAX=N` asks (a user who accepts the wait).
fn one_by_one_max() -> Option<usize> {
    std::env::var("RIP_PROBE_ONE_BY_ONE_MAX")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// What detaching one uprobe costs on this kernel: measured once per run,
/// on `site`, by attaching and detaching it twice (the faster of the two:
/// a grace period that began before is not its cost).
fn detach_cost(prog: &mut UProbe, site: &ProbeSite, scope: UProbeScope) -> Result<Duration> {
    static COST: OnceLock<Duration> = OnceLock::new();
    if let Some(c) = COST.get() {
        return Ok(*c);
    }
    let mut best = Duration::MAX;
    for _ in 0..2 {
        let id = prog
            .attach(site.file_offset, &site.binary, scope)
            .map_err(|e| {
                super::privileges::uprobe_error(format!("a uprobe to {}", site.name), e)
            })?;
        let link = prog
            .take_link(id)
            .map_err(|e| Error::program(ProgramOp::TakeLink, &site.name, e))?;
        let t = Instant::now();
        drop(link);
        best = best.min(t.elapsed());
    }
    Ok(*COST.get_or_init(|| best))
}

/// Uprobes attached one by one, held as their links: dropping it detaches
/// them (one grace period each).
pub(crate) struct OneByOne {
    links: Vec<UProbeLink>,
}

impl OneByOne {
    fn push(&mut self, link: UProbeLink) {
        self.links.push(link);
        HELD_SINGLE.fetch_add(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for OneByOne {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OneByOne({} uprobes)", self.links.len())
    }
}

impl Drop for OneByOne {
    fn drop(&mut self) {
        let n = self.links.len();
        // Detached here, one grace period each.
        self.links.clear();
        HELD_SINGLE.fetch_sub(n, Ordering::Relaxed);
    }
}

/// What holds attached uprobes: dropping it detaches them.
#[derive(Debug)]
pub(crate) enum Held {
    /// One `uprobe_multi` link for many functions of a binary.
    Multi(#[allow(dead_code, reason = "held for its drop, which detaches")] MultiLink),
    /// Uprobes attached one by one.
    Single(#[allow(dead_code, reason = "held for its drop, which detaches")] OneByOne),
}

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

/// The functions a binary lists outside its ELF symbol tables, each name
/// with its file offset: a stripped Go binary keeps every function's name
/// in its `.gopclntab`. The symbolize stage reads them (collect does not
/// read symbol tables of that kind).
pub type MoreFunctions<'a> = &'a dyn Fn(&Path) -> Vec<(String, u64)>;

/// The functions of the target matching `spec`.
pub fn resolve(pid: u32, spec: &str) -> Result<Vec<ProbeSite>> {
    resolve_with(pid, spec, None)
}

/// As [`resolve`], and where the ELF symbol tables have no function that
/// matches, the functions `more` lists of the binary (a stripped Go
/// binary's, by the names Go gives them: `main.handle`,
/// `net/http.(*conn).serve`).
pub fn resolve_with(
    pid: u32,
    spec: &str,
    more: Option<MoreFunctions<'_>>,
) -> Result<Vec<ProbeSite>> {
    let (binary, shown, pattern) = target_binary(pid, spec)?;
    let (spec, pattern_shown) = (cut(spec), cut(&pattern));
    let glob = glob::Pattern::new(&pattern).map_err(|source| Error::BadPattern {
        spec: spec.to_string(),
        source,
    })?;
    let mut sites = Vec::new();
    // Every function's short name, for the "no match" error's suggestions.
    let mut all = Vec::new();
    each_function(&binary, &shown, |name, off| {
        let demangled = rustc_demangle::demangle(name).to_string();
        // `{:#}` drops the hash suffix of Rust symbols.
        let short = format!("{:#}", rustc_demangle::demangle(name));
        all.push(short.clone());
        if glob.matches(name) || glob.matches(&demangled) || glob.matches(&short) {
            sites.push(ProbeSite {
                binary: binary.clone(),
                mapped: shown.clone(),
                name: name.to_string(),
                file_offset: off,
            });
        }
    })?;
    if sites.is_empty()
        && let Some(more) = more
    {
        for (name, off) in more(&binary) {
            if glob.matches(&name) {
                sites.push(ProbeSite {
                    binary: binary.clone(),
                    mapped: shown.clone(),
                    name: name.clone(),
                    file_offset: off,
                });
            }
            all.push(name);
        }
    }
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

/// Calls `f` with the name and file offset of each function the ELF
/// symbol tables of `binary` (shown to the user as `shown`) define: .symtab,
/// else .dynsym in a stripped binary (a distribution's programs export their
/// functions there), not DWARF: a binary without debug information still
/// has its functions listed.
fn each_function(binary: &Path, shown: &Path, mut f: impl FnMut(&str, u64)) -> Result<()> {
    let mut elf = Elf::new(binary);
    elf.debug_syms = false;
    let src = Source::Elf(elf);
    Inspector::new()
        .for_each(&src, |s| {
            if s.sym_type == SymType::Function
                && s.addr != 0
                && let Some(off) = s.file_offset
            {
                f(&s.name, off);
            }
            ControlFlow::Continue(())
        })
        .map_err(|e| Error::Symbols {
            binary: shown.to_path_buf(),
            why: symbols_error(binary, &e.to_string()),
        })?;
    Ok(())
}

/// The functions of the target's executable (`lib` `None`), or of the
/// first mapped library whose file name contains `lib`, whose names are
/// exactly one of `names` (as stored, with the index of the name): empty
/// when none is defined there. Aliases (two names at one address) give
/// one site, under the first name listed.
pub fn functions_named(
    pid: u32,
    lib: Option<&str>,
    names: &[&str],
) -> Result<Vec<(ProbeSite, usize)>> {
    let spec = match lib {
        Some(lib) => format!("{lib}:*"),
        None => "*".to_string(),
    };
    let (binary, shown, _) = target_binary(pid, &spec)?;
    let mut sites: Vec<(ProbeSite, usize)> = Vec::new();
    each_function(&binary, &shown, |name, off| {
        if let Some(i) = names.iter().position(|n| *n == name) {
            sites.push((
                ProbeSite {
                    binary: binary.clone(),
                    mapped: shown.clone(),
                    name: name.to_string(),
                    file_offset: off,
                },
                i,
            ));
        }
    })?;
    sites.sort_by_key(|(s, i)| (s.file_offset, *i));
    sites.dedup_by_key(|(s, _)| s.file_offset);
    sites.sort_by_key(|(_, i)| *i);
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

/// Attaches `fn_entry` to every site, firing only for `pid`; dropping
/// what it returns detaches them.
pub(crate) fn attach(ebpf: &mut Ebpf, pid: u32, sites: &[ProbeSite]) -> Result<Vec<Held>> {
    attach_program(ebpf, names::FN_ENTRY, false, pid, sites)
}

/// Attaches program `name` of `ebpf` (a uretprobe if `ret`) to every site,
/// firing only for process `pid`: one `uprobe_multi` link per binary where
/// the kernel has them (one attach and one detach for any number of
/// functions), else one uprobe per site, as many as detach within
/// [`DETACH_BUDGET`] (or `RIP_PROBE_ONE_BY_ONE_MAX`). A SIGINT or SIGTERM
/// while attaching one by one (when the CLI catches them) stops it: what
/// was attached is detached and [`Error::Interrupted`] returned.
pub(crate) fn attach_program(
    ebpf: &mut Ebpf,
    name: &str,
    ret: bool,
    pid: u32,
    sites: &[ProbeSite],
) -> Result<Vec<Held>> {
    let what = if ret { "uretprobe" } else { "uprobe" };
    // The kernel refuses an event on an exited thread: once the leader
    // exited, a live thread names the process (uprobes filter by its memory).
    let scoped = crate::discover::view_pid(pid);
    let scoped_nz = NonZeroU32::new(scoped).ok_or(crate::discover::Error::NoSuchProcess(pid))?;
    let mut links = Vec::new();
    let mut single: Vec<&ProbeSite> = Vec::new();
    for (binary, group) in by_binary(sites) {
        // A link names its process by the thread group's id, which a
        // leader that exited (a zombie with live threads) no longer
        // answers for: such a process gets one uprobe per function, which
        // a live thread scopes.
        if scoped != pid {
            single.extend(group);
            continue;
        }
        let offsets: Vec<u64> = group.iter().map(|s| s.file_offset).collect();
        match uprobe_multi::attach(ebpf, name, ret, scoped, binary, &offsets) {
            Ok(Bulk::Linked(link)) => links.push(Held::Multi(link)),
            Ok(Bulk::Unsupported) => single.extend(group),
            Err(e) => {
                let op = format!(
                    "{name} as {what}s to {} functions of {}",
                    group.len(),
                    group[0].mapped.display()
                );
                return Err(Error::program(
                    ProgramOp::Attach,
                    op,
                    ProgramError::SyscallError(SyscallError {
                        call: "bpf_link_create",
                        io_error: e,
                    }),
                )
                .into());
            }
        }
    }
    if single.is_empty() {
        return Ok(links);
    }
    let prog: &mut UProbe = super::program(ebpf, name)?;
    prog.load()
        .map_err(|e| Error::program(ProgramOp::Load, name, e))?;
    let scope = UProbeScope::OneProcess(scoped_nz);
    let n = single.len();
    // The budget is for every uprobe this run holds one by one (`calls`
    // attaches entries and returns).
    let held = HELD_SINGLE.load(Ordering::Relaxed);
    let (max, each) = match one_by_one_max() {
        Some(max) => (max, None),
        None if held + n <= UNMEASURED_SINGLE_PROBES => (UNMEASURED_SINGLE_PROBES, None),
        None => {
            let each = detach_cost(prog, single[0], scope)?;
            let fit = DETACH_BUDGET.as_nanos() / each.as_nanos().max(1);
            let fit = usize::try_from(fit).unwrap_or(usize::MAX);
            (fit.max(UNMEASURED_SINGLE_PROBES), Some(each))
        }
    };
    if held + n > max {
        let why = uprobe_multi::refused().unwrap_or_default();
        return Err(Error::TooManyOneByOne {
            count: held + n,
            what,
            max,
            each,
            why,
        }
        .into());
    }
    // One by one, many take seconds: say how far it got, on a terminal.
    let progress = n >= 100 && std::io::stderr().is_terminal();
    let mut attached = OneByOne {
        links: Vec::with_capacity(n),
    };
    for (i, s) in single.into_iter().enumerate() {
        if let Some(signal) = crate::util::interrupt::stop_requested() {
            if progress {
                eprint!("\rrip-probe: {signal}: detaching the {i} {what}s attached\x1b[K");
            }
            drop(attached);
            if progress {
                eprint!("\r\x1b[K");
            }
            return Err(Error::Interrupted {
                signal,
                what,
                attached: i,
                count: n,
            }
            .into());
        }
        if progress && i % 50 == 0 {
            eprint!("\rrip-probe: attaching {what}s one by one (Ctrl-C stops): {i}/{n}\x1b[K");
        }
        let id = prog
            .attach(s.file_offset, &s.binary, scope)
            .map_err(|e| super::privileges::uprobe_error(format!("a {what} to {}", s.name), e))?;
        let link = prog
            .take_link(id)
            .map_err(|e| Error::program(ProgramOp::TakeLink, name, e))?;
        attached.push(link);
    }
    if progress {
        eprint!("\r\x1b[K");
    }
    links.push(Held::Single(attached));
    Ok(links)
}

/// `sites` grouped by the binary holding them, in their order.
fn by_binary(sites: &[ProbeSite]) -> Vec<(&Path, Vec<&ProbeSite>)> {
    let mut groups: Vec<(&Path, Vec<&ProbeSite>)> = Vec::new();
    for s in sites {
        match groups.iter_mut().find(|(b, _)| *b == s.binary.as_path()) {
            Some((_, g)) => g.push(s),
            None => groups.push((&s.binary, vec![s])),
        }
    }
    groups
}
