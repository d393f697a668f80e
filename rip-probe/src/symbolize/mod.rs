//! Symbolization with blazesym: user addresses of a live process, user
//! addresses of a dead one through the ring's module table (file offsets
//! and build-ids), and kernel addresses through kallsyms. Go binaries'
//! code is named from their `.gopclntab` (module `gopclntab`), which stripped
//! ones keep.
//!
//! Every distinct address is symbolized once per report, however many
//! threads share it.

use std::{
    collections::{BTreeSet, HashMap},
    path::{Path, PathBuf},
    sync::{Arc, Mutex, OnceLock, mpsc},
};

use librip::reader::{Follow, MapsLine, OpenError, RangeIndex, RegularFile};

use blazesym::symbolize::{
    Input, Symbolized, Symbolizer as Blaze,
    source::{Elf, Kernel, Source},
};

pub(crate) mod data;
mod debuginfo;
pub(crate) mod go_table;
pub(crate) mod gopclntab;
pub(crate) mod held;
mod jit;
pub(crate) mod locks;
mod sites;
pub(crate) mod stacks;
mod thread;

pub(crate) use thread::{Resolve, SymbolizerThread};

use held::{Cached, FileKey, Holders};

use crate::{
    collect::ring::ModuleMap,
    discover::maps::ProcessMaps,
    model::{Frame, InlinedFrame},
};

/// Where the user addresses of a report come from.
pub(crate) enum UserSpace<'a> {
    /// A live process: blazesym reads its maps and binaries.
    Live(u32),
    /// A process that may be gone: the ring's module table.
    Modules(&'a [ModuleMap]),
    /// A live process with a ring: addresses inside the ring's module table
    /// are symbolized from it (no need to parse /proc/PID/maps, which has
    /// two lines per thread), the others through the live process.
    LiveWithModules(u32, &'a [ModuleMap]),
}

/// A symbolizer for one report. Caches parsed binaries across calls.
pub(crate) struct Symbolizer {
    blaze: Blaze,
    /// Problems worth telling the user (missing binary, build-id mismatch),
    /// each reported once.
    warnings: BTreeSet<String>,
    /// Binaries named by rings, opened once each (only if regular files)
    /// and kept open: blazesym reads them through `/proc/self/fd/N`, so it
    /// never opens a path a ring chose, and the numbers are never reused.
    opened: HashMap<PathBuf, Result<RegularFile, String>>,
    /// Site tables of the binaries seen, parsed once each.
    sites: sites::SiteCache,
    /// The perf maps of JIT runtimes, for their generated code.
    jit: jit::JitMaps,
    /// Separate debug files of binaries shipped without DWARF.
    split: debuginfo::SplitDebug,
    /// The `.gopclntab` of the binaries seen, by file key (`None`: not a
    /// Go binary, or one whose table cannot be read).
    go: HashMap<FileKey, Option<Arc<gopclntab::GoBinary>>>,
    /// The live process whose addresses are being named, if any.
    holder: Option<u32>,
    /// What each live process's addresses made this symbolizer cache: a
    /// symbolizer kept across many targets ([`Symbolizer::retain_targets`])
    /// drops a binary's state once no target it still watches used it.
    held: Holders<Cached>,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer {
    /// A symbolizer that reports source lines and inlined functions.
    pub(crate) fn new() -> Self {
        Symbolizer {
            blaze: Blaze::builder()
                .enable_code_info(true)
                .enable_inlined_fns(true)
                .enable_demangling(true)
                .build(),
            warnings: BTreeSet::new(),
            opened: HashMap::new(),
            sites: sites::SiteCache::default(),
            jit: jit::JitMaps::default(),
            split: debuginfo::SplitDebug::default(),
            go: HashMap::new(),
            holder: None,
            held: Holders::default(),
        }
    }

    /// Notes that the live process being named made this symbolizer
    /// cache `c`.
    fn hold(&mut self, c: Cached) {
        if let Some(pid) = self.holder {
            self.held.note(pid, c);
        }
    }

    /// Forgets the processes `live` says are no longer watched, and drops
    /// what was cached for binaries none of the others used: blazesym's
    /// parsed files (by the paths it opened them at), Go and site tables,
    /// separate debug files, perf maps, binaries a ring named. A
    /// symbolizer kept across many targets coming and going stays as
    /// large as what its live targets map.
    pub(crate) fn retain_targets(&mut self, live: impl Fn(u32) -> bool) {
        let gone: Vec<u32> = self.held.pids().filter(|&p| !live(p)).collect();
        for c in self.held.retain(&live) {
            match c {
                Cached::Elf(path) => {
                    let evict = blazesym::symbolize::evict::Evict::from(
                        blazesym::symbolize::evict::Elf::new(path),
                    );
                    // Best effort by blazesym's own word; nothing to say.
                    let _ = self.blaze.evict(&evict);
                }
                Cached::File(key) => {
                    self.go.remove(&key);
                    self.sites.forget(&key);
                    self.split.forget(&key);
                }
                Cached::Module(path) => {
                    self.opened.remove(&path);
                }
            }
        }
        for pid in gone {
            let evict = blazesym::symbolize::evict::Evict::from(
                blazesym::symbolize::evict::Process::new(blazesym::Pid::from(pid)),
            );
            let _ = self.blaze.evict(&evict);
        }
        self.jit.retain(&live);
    }

    /// How many processes hold something in this symbolizer.
    #[cfg(test)]
    pub(crate) fn holders(&self) -> usize {
        self.held.targets()
    }

    /// The Go tables of `file`, read once per file: Go binaries are named
    /// from them (also stripped ones, which keep them for the runtime's
    /// own tracebacks), like DWARF names others, inlined calls included.
    fn go_binary(&mut self, file: &RegularFile, name: &str) -> Option<Arc<gopclntab::GoBinary>> {
        let key = FileKey::of(file);
        self.hold(Cached::File(key));
        if let Some(g) = self.go.get(&key) {
            return g.clone();
        }
        let g = match gopclntab::GoBinary::from_file(file) {
            Ok(g) => g.map(Arc::new),
            Err(e) => {
                self.warnings
                    .insert(format!("{name}: its Go symbols are not read: {e}"));
                None
            }
        };
        self.go.insert(key, g.clone());
        g
    }

    /// Names the `(address, file offset)` pairs of a Go binary's code
    /// from its `.gopclntab` (`vaddr` turns a pair into the binary's
    /// virtual address); returns the pairs it does not hold (a cgo
    /// program's C code), left to blazesym.
    fn go_names(
        &mut self,
        file: &RegularFile,
        name: &str,
        pairs: &[(u64, u64)],
        vaddr: &dyn Fn(&gopclntab::GoBinary, u64) -> Option<u64>,
        out: &mut HashMap<u64, Frame>,
    ) -> Vec<(u64, u64)> {
        let Some(go) = self.go_binary(file, name) else {
            return pairs.to_vec();
        };
        pairs
            .iter()
            .filter(|&&(a, off)| {
                let Some(f) = vaddr(&go, off).and_then(|v| go_frame(&go, a, v, name)) else {
                    return true;
                };
                out.insert(a, f);
                false
            })
            .copied()
            .collect()
    }

    /// Loads what symbolizing will need for a live process — the debug
    /// information of its executable and libraries — ahead of time, so a
    /// session can do it while it observes instead of after. (kallsyms is
    /// already loading: every session primes it as it attaches, see
    /// [`prime_kernel`].)
    pub(crate) fn warm_up(&mut self, binaries: &[PathBuf]) {
        // Symbolizing one address of each binary (its entry point) the way
        // reports do makes blazesym open it and index its DWARF units.
        for b in binaries {
            if let Some(entry) = elf_entry(b) {
                let src = Source::Elf(Elf::new(b));
                let _ = self.blaze.symbolize(&src, Input::VirtOffset(&[entry][..]));
            }
        }
        self.warnings.clear();
    }

    /// Warnings gathered so far, sorted.
    pub(crate) fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings).into_iter().collect()
    }

    /// Symbolizes user-space addresses. Unknown addresses still get a frame
    /// (with module and offset when the module is known).
    pub(crate) fn user(&mut self, space: &UserSpace<'_>, addrs: &[u64]) -> HashMap<u64, Frame> {
        let addrs = distinct(addrs);
        self.holder = match space {
            UserSpace::Live(pid) | UserSpace::LiveWithModules(pid, _) => Some(*pid),
            UserSpace::Modules(_) => None,
        };
        match space {
            UserSpace::Live(pid) => self.live(*pid, &addrs),
            UserSpace::Modules(mods) => self.post_mortem(mods, &addrs),
            UserSpace::LiveWithModules(pid, mods) => {
                let index = ModuleIndex::new(mods);
                let (known, rest): (Vec<u64>, Vec<u64>) =
                    addrs.iter().partition(|&&a| index.find(a).is_some());
                let mut out = self.post_mortem(mods, &known);
                if !rest.is_empty() {
                    out.extend(self.live(*pid, &rest));
                }
                out
            }
        }
    }

    fn live(&mut self, pid: u32, addrs: &[u64]) -> HashMap<u64, Frame> {
        let mut out = HashMap::with_capacity(addrs.len());
        // The mappings holding the addresses, asked one by one (sorted
        // addresses: one question per mapping): the whole of
        // /proc/PID/maps has two lines per thread.
        let maps = ProcessMaps::open(pid).ok();
        let mut groups: Vec<(MapsLine, Vec<(u64, u64)>)> = Vec::new();
        let mut jitted = Vec::new();
        for &a in addrs {
            if let Some((m, v)) = groups.last_mut()
                && (m.start..m.end).contains(&a)
            {
                v.push((a, a - m.start + m.offset));
                continue;
            }
            let m = maps
                .as_ref()
                .and_then(|maps| maps.containing(a).ok().flatten());
            match m {
                Some(m) if m.file().is_some() => match (a - m.start).checked_add(m.offset) {
                    Some(off) => groups.push((m, vec![(a, off)])),
                    None => {
                        out.insert(a, bare(a));
                    }
                },
                // Code no file holds: a JIT's, named by its perf map.
                Some(m) if is_generated_code(&m) => jitted.push(a),
                _ => {
                    out.insert(a, bare(a));
                }
            }
        }
        for (m, pairs) in groups {
            self.live_mapping(pid, &m, &pairs, &mut out);
        }
        if !jitted.is_empty() {
            self.live_jit(pid, &jitted, &mut out);
        }
        out
    }

    /// Names addresses in anonymous code of a live process from the perf
    /// map its runtime writes, if it writes one.
    fn live_jit(&mut self, pid: u32, addrs: &[u64], out: &mut HashMap<u64, Frame>) {
        let (map, refused) = match self.jit.get(pid) {
            Ok(m) => (m, false),
            // The warning says why; the hint below would be wrong.
            Err(e) => {
                self.warnings.insert(e);
                (None, true)
            }
        };
        let mut unnamed = 0;
        for &a in addrs {
            let f = match map.as_ref().and_then(|m| m.find(a)) {
                Some(s) => Frame {
                    addr: a,
                    function: Some(s.name.to_string()),
                    function_offset: Some(a - s.start),
                    ..Frame::default()
                },
                None => {
                    unnamed += 1;
                    bare(a)
                }
            };
            out.insert(a, f);
        }
        if unnamed == 0 || refused {
            return;
        }
        let name = jit::perf_map_name(pid);
        if map.is_none() {
            self.warnings.insert(format!(
                "addresses in generated code (a JIT's) have no names: the process writes no {name} \
                 (Java: jcmd PID Compiler.perfmap; Node: --perf-basic-prof)"
            ));
        } else {
            // Java writes its map when asked: code compiled since is not in it.
            self.warnings.insert(format!(
                "{name} names no code at some addresses in generated code: it may be older than that code \
                 (Java: run jcmd PID Compiler.perfmap again)"
            ));
        }
    }

    /// Symbolizes `(address, file offset)` pairs of one file mapping of a
    /// live process, from the mapped file itself.
    fn live_mapping(
        &mut self,
        pid: u32,
        m: &MapsLine,
        pairs: &[(u64, u64)],
        out: &mut HashMap<u64, Frame>,
    ) {
        let name = m.name.clone();
        // The very file mapped, for its Go tables and its site table.
        let mapped = if m.is_exec() {
            librip::reader::open_mapped(pid, m)
        } else {
            None
        };
        let rest = match &mapped {
            Some(f) => self.go_names(f, &name, pairs, &|g, off| g.vaddr_of_offset(off), out),
            None => pairs.to_vec(),
        };
        if rest.is_empty() {
            return;
        }
        let pairs = &rest[..];
        let file = crate::collect::procfs::code_path(pid, m);
        if let Some(path) = &file {
            self.hold(Cached::Elf(path.clone()));
        }
        let syms = file.as_ref().and_then(|path| {
            let offsets: Vec<u64> = pairs.iter().map(|p| p.1).collect();
            let src = Source::Elf(Elf::new(path));
            self.blaze.symbolize(&src, Input::FileOffset(&offsets)).ok()
        });
        match syms {
            Some(syms) => {
                for (&(a, off), s) in pairs.iter().zip(syms) {
                    let mut f = to_frame(a, &s, Some((&name, off)));
                    f.module = Some(name.clone());
                    out.insert(a, f);
                }
            }
            // An address in a binary without symbols (stripped, as
            // shipped) still names its module and offset, so that distinct
            // places stay distinct and can be looked up later
            // (`addr2line -e`).
            None => {
                for &(a, off) in pairs {
                    out.insert(a, module_only(a, &name, off));
                }
            }
        }
        if let Some(path) = &file
            && let Some(key) = FileKey::at(path)
        {
            self.split_lines(path, key, &name, pairs, out);
        }
        // A snap's site, from the site table of the very file mapped.
        let Some(file) = mapped else {
            return;
        };
        let key = FileKey::of(&file);
        self.hold(Cached::File(key));
        match self.sites.get(&file, key) {
            Ok(Some(t)) => {
                for &(a, off) in pairs {
                    if let (Some(site), Some(f)) = (t.table.find(off), out.get_mut(&a)) {
                        sites::apply(f, site);
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                self.warnings.insert(format!("{name}: {e}; it is ignored"));
            }
        }
    }

    /// Lines for the addresses of `pairs` that have none, from the
    /// separate debug file of the mapped binary at `path`, when it ships
    /// without DWARF and one is found by its build-id.
    fn split_lines(
        &mut self,
        path: &Path,
        key: FileKey,
        name: &str,
        pairs: &[(u64, u64)],
        out: &mut HashMap<u64, Frame>,
    ) {
        let lineless: Vec<(u64, u64)> = pairs
            .iter()
            .filter(|(a, _)| out.get(a).is_some_and(|f| f.file.is_none()))
            .copied()
            .collect();
        if lineless.is_empty() {
            return;
        }
        self.hold(Cached::File(key));
        let warnings = &mut self.warnings;
        let Some(split) = self.split.find(path, key, &mut |w| {
            warnings.insert(w);
        }) else {
            return;
        };
        self.hold(Cached::Elf(split.path.clone()));
        let (known, virts): (Vec<(u64, u64)>, Vec<u64>) = lineless
            .iter()
            .filter_map(|&(a, off)| Some(((a, off), split.virt(off)?)))
            .unzip();
        let src = Source::Elf(Elf::new(&split.path));
        let Ok(syms) = self.blaze.symbolize(&src, Input::VirtOffset(&virts)) else {
            self.warnings.insert(format!(
                "{name}: cannot read its debug file {}",
                split.path.display()
            ));
            return;
        };
        for (&(a, off), s) in known.iter().zip(syms) {
            if s.as_sym().is_some() {
                let old = out.get(&a);
                let mut f = to_frame(a, &s, Some((name, off)));
                f.module = Some(name.to_string());
                f.module_offset = old.and_then(|o| o.module_offset);
                out.insert(a, f);
            }
        }
    }

    fn post_mortem(&mut self, mods: &[ModuleMap], addrs: &[u64]) -> HashMap<u64, Frame> {
        let mut out = HashMap::with_capacity(addrs.len());
        // Group addresses by module so each binary is opened once.
        let mut by_module: HashMap<usize, Vec<(u64, u64)>> = HashMap::new();
        let index = ModuleIndex::new(mods);
        for &a in addrs {
            let found = index
                .find(a)
                .map(|i| (i, mods[i].file_offset.checked_add(a - mods[i].start)));
            match found {
                Some((i, Some(off))) => by_module.entry(i).or_default().push((a, off)),
                Some((i, None)) => {
                    self.warnings.insert(format!(
                        "{}: its file offset in the ring's module table overflows; its addresses are shown bare",
                        mods[i].path.display()
                    ));
                    out.insert(a, bare(a));
                }
                None => {
                    out.insert(a, bare(a));
                }
            }
        }
        for (i, pairs) in by_module {
            let m = &mods[i];
            let name = m.path.display().to_string();
            let unresolved = |out: &mut HashMap<u64, Frame>, pairs: &[(u64, u64)]| {
                for &(a, off) in pairs {
                    out.insert(a, module_only(a, &name, off));
                }
            };
            self.hold(Cached::Module(module_key(m)));
            let file = self
                .opened
                .entry(module_key(m))
                .or_insert_with(|| open_module(m))
                .as_ref()
                .map(RegularFile::proc_path)
                .map_err(String::clone);
            if let Ok(p) = &file {
                self.hold(Cached::Elf(p.clone()));
            }
            let problem = match &file {
                Ok(p) => check_binary(p, m.build_id.as_deref()),
                Err(e) => Some(String::clone(e)),
            };
            if let Some(problem) = problem {
                self.warnings.insert(format!(
                    "{name}: {problem}; its addresses are shown as module+offset"
                ));
                unresolved(&mut out, &pairs);
                continue;
            }
            let Ok(file) = file else { continue };
            // A Go binary's code is named from its .gopclntab; blazesym
            // gets the rest.
            let pairs = match self.opened.remove(&module_key(m)) {
                Some(Ok(opened)) => {
                    let rest = self.go_names(
                        &opened,
                        &name,
                        &pairs,
                        &|g, off| g.vaddr_of_offset(off),
                        &mut out,
                    );
                    self.opened.insert(module_key(m), Ok(opened));
                    for &(a, off) in &pairs {
                        if let Some(f) = out.get_mut(&a)
                            && !rest.contains(&(a, off))
                        {
                            f.module_offset = Some(off);
                        }
                    }
                    rest
                }
                Some(e) => {
                    self.opened.insert(module_key(m), e);
                    pairs
                }
                None => pairs,
            };
            if pairs.is_empty() {
                continue;
            }
            let offsets: Vec<u64> = pairs.iter().map(|p| p.1).collect();
            let src = Source::Elf(Elf::new(&file));
            match self.blaze.symbolize(&src, Input::FileOffset(&offsets)) {
                Ok(syms) => {
                    for (&(a, off), s) in pairs.iter().zip(syms) {
                        let mut f = to_frame(a, &s, Some((&name, off)));
                        f.module = Some(name.clone());
                        f.module_offset = Some(off);
                        out.insert(a, f);
                    }
                }
                Err(_) => {
                    // The parser's message may quote the file's bytes.
                    self.warnings
                        .insert(format!("{name}: cannot symbolize: not a readable ELF file"));
                    unresolved(&mut out, &pairs);
                }
            }
            // Snap sites from the binary's own table, if it matches the
            // build-id the ring recorded.
            let Some(Ok(opened)) = self.opened.get(&module_key(m)) else {
                continue;
            };
            let key = FileKey::of(opened);
            self.hold(Cached::File(key));
            self.split_lines(&file, key, &name, &pairs, &mut out);
            let Some(Ok(opened)) = self.opened.get(&module_key(m)) else {
                continue;
            };
            let table = match self.sites.get(opened, key) {
                Ok(Some(t)) => t,
                Ok(None) => continue,
                Err(e) => {
                    self.warnings.insert(format!("{name}: {e}; it is ignored"));
                    continue;
                }
            };
            if let (Some(want), Some(have)) = (m.build_id.as_deref(), table.build_id.as_deref())
                && want != have
            {
                self.warnings.insert(format!(
                    "{name}: its site table is ignored: build-id mismatch (ring {}, file {})",
                    hex(want),
                    hex(have)
                ));
                continue;
            }
            for &(a, off) in &pairs {
                if let (Some(site), Some(f)) = (table.table.find(off), out.get_mut(&a)) {
                    sites::apply(f, site);
                }
            }
        }
        out
    }

    /// Symbolizes addresses of a non-PIE executable (its virtual addresses
    /// are the addresses it ran at), opened only if it is a regular file.
    pub(crate) fn executable(&mut self, path: &Path, addrs: &[u64]) -> HashMap<u64, Frame> {
        let addrs = distinct(addrs);
        let name = path.display().to_string();
        let file = match open_binary(path) {
            Ok(f) => f,
            Err(e) => {
                self.warnings.insert(format!("{name}: {e}"));
                return addrs.iter().map(|&a| (a, bare(a))).collect();
            }
        };
        // A Go binary's code from its .gopclntab, the rest by blazesym.
        let mut out = HashMap::new();
        let pairs: Vec<(u64, u64)> = addrs.iter().map(|&a| (a, a)).collect();
        let rest = self.go_names(&file, &name, &pairs, &|_, v| Some(v), &mut out);
        if rest.is_empty() {
            return out;
        }
        let addrs: Vec<u64> = rest.iter().map(|p| p.0).collect();
        let src = Source::Elf(Elf::new(file.proc_path()));
        match self.blaze.symbolize(&src, Input::VirtOffset(&addrs)) {
            Ok(syms) => out.extend(
                addrs
                    .iter()
                    .zip(syms)
                    .map(|(&a, s)| (a, to_frame(a, &s, None))),
            ),
            Err(_) => {
                self.warnings
                    .insert(format!("{name}: cannot symbolize: not a readable ELF file"));
                out.extend(addrs.iter().map(|&a| (a, bare(a))));
            }
        }
        out
    }

    /// Symbolizes kernel addresses through /proc/kallsyms.
    pub(crate) fn kernel(&mut self, addrs: &[u64]) -> HashMap<u64, Frame> {
        let addrs = distinct(addrs);
        let mut out = kernel_shared(addrs.clone()).unwrap_or_else(|e| {
            self.warnings
                .insert(format!("cannot symbolize kernel stacks: {e}"));
            addrs.iter().map(|&a| (a, bare(a))).collect()
        });
        for f in out.values_mut() {
            f.function_offset = None;
        }
        out
    }
}

/// A kernel symbolization job: the addresses, and where the frames go.
type KernelJob = (
    Vec<u64>,
    mpsc::Sender<std::result::Result<HashMap<u64, Frame>, String>>,
);

/// The queue of the one thread that symbolizes kernel addresses through
/// kallsyms for the whole run, whatever the number of targets and
/// symbolizers: kallsyms, the same for all, is parsed once (tens of
/// megabytes each time otherwise). blazesym's symbolizer cannot move
/// between threads, so it stays on its own and takes jobs in order.
fn kernel_jobs() -> &'static Mutex<mpsc::Sender<KernelJob>> {
    static JOBS: OnceLock<Mutex<mpsc::Sender<KernelJob>>> = OnceLock::new();
    JOBS.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<KernelJob>();
        let _ = std::thread::Builder::new()
            .name("rip-kallsyms".into())
            .spawn(move || {
                let blaze = Blaze::new();
                let src = Source::Kernel(Kernel {
                    kallsyms: blazesym::MaybeDefault::Default,
                    // No vmlinux with DWARF is installed on production
                    // machines; looking for one costs time and finds
                    // nothing.
                    vmlinux: blazesym::MaybeDefault::None,
                    ..Kernel::default()
                });
                for (addrs, reply) in rx {
                    let frames = blaze
                        .symbolize(&src, Input::AbsAddr(&addrs))
                        .map(|syms| {
                            addrs
                                .iter()
                                .zip(syms)
                                .map(|(&a, s)| (a, to_frame(a, &s, None)))
                                .collect()
                        })
                        .map_err(|e| e.to_string());
                    // A primer's reply has nobody waiting for it.
                    let _ = reply.send(frames);
                }
            });
        Mutex::new(tx)
    })
}

/// Symbolizes kernel addresses on the kallsyms thread ([`kernel_jobs`]),
/// waiting for its answer.
fn kernel_shared(addrs: Vec<u64>) -> std::result::Result<HashMap<u64, Frame>, String> {
    let (reply, frames) = mpsc::channel();
    kernel_jobs()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((addrs, reply))
        .map_err(|_| "the kallsyms thread is gone".to_string())?;
    frames
        .recv()
        .map_err(|_| "the kallsyms thread is gone".to_string())?
}

/// Has the kallsyms thread load kallsyms now, without waiting for it:
/// every report names kernel frames (the task iterator takes each
/// thread's kernel stack), and reading /proc/kallsyms is tens of
/// milliseconds of the kernel's own time, which the loading and reading
/// that precede symbolizing can hide. The first real job waits behind it
/// on the same thread instead of starting the read itself.
pub(crate) fn prime_kernel() {
    // Any address makes blazesym parse the file; none is named.
    let (reply, _) = mpsc::channel();
    let _ = kernel_jobs()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((vec![0], reply));
}

/// Module lookup by sorted ranges (librip's [`RangeIndex`]).
pub(crate) struct ModuleIndex(RangeIndex);

impl ModuleIndex {
    /// Indexes `mods` (O(n log n)); the later of overlapping entries wins.
    pub(crate) fn new(mods: &[ModuleMap]) -> ModuleIndex {
        ModuleIndex(RangeIndex::new(mods.iter().map(|m| (m.start, m.end))))
    }

    /// The index in the table of the module holding `addr`.
    pub(crate) fn find(&self, addr: u64) -> Option<usize> {
        self.0.find(addr)
    }
}

/// Opens a binary a ring names, if it is a regular file (a symlink is
/// followed: libraries are loaded through soname links). The error says
/// why in words, never with the file's contents.
fn open_binary(path: &Path) -> Result<RegularFile, String> {
    RegularFile::open(path, Follow::Yes).map_err(open_error_text)
}

/// Why a binary did not open, in words, never with the file's contents.
fn open_error_text(e: OpenError) -> String {
    match e {
        OpenError::Io(e) if e.kind() == std::io::ErrorKind::NotFound => "binary not found".into(),
        OpenError::Io(e) => format!("cannot open: {}", e.kind()),
        OpenError::NotRegular(what) => format!("not a regular file ({what})"),
    }
}

/// Where a module's binary is, as the cache knows it: its path under the
/// root it is resolved in.
fn module_key(m: &ModuleMap) -> PathBuf {
    match &m.root {
        Some(root) => root.join(m.path.strip_prefix("/").unwrap_or(&m.path)),
        None => m.path.clone(),
    }
}

/// Opens a module's binary: by its path, or by its path inside the root
/// of the process that loaded it (another mount namespace, a container's
/// root file system), never leaving that root.
fn open_module(m: &ModuleMap) -> Result<RegularFile, String> {
    match &m.root {
        None => open_binary(&m.path),
        Some(root) => RegularFile::open_in_root(root, &m.path, Follow::Yes)
            .map_err(|e| format!("in {}: {}", root.display(), open_error_text(e))),
    }
}

/// Whether a mapping without a file is code a program generated: an
/// executable anonymous mapping (named or not) or a deleted file's (a
/// memfd), not the kernel's `[vdso]`, `[vsyscall]` or `[uprobes]`.
fn is_generated_code(m: &MapsLine) -> bool {
    m.is_exec() && (!m.name.starts_with('[') || m.name.starts_with("[anon:"))
}

/// The entry point (`e_entry`) of a 64-bit little-endian ELF file.
fn elf_entry(path: &Path) -> Option<u64> {
    let mut head = [0u8; 32];
    let f = RegularFile::open(path, Follow::Yes).ok()?;
    (f.read_at(0, &mut head).ok()? == head.len()).then_some(())?;
    (head[..4] == *b"\x7fELF" && head[4] == 2 && head[5] == 1)
        .then(|| u64::from_le_bytes(head[24..32].try_into().expect("8 bytes")))
        .filter(|&e| e != 0)
}

fn distinct(addrs: &[u64]) -> Vec<u64> {
    let mut v = addrs.to_vec();
    v.sort_unstable();
    v.dedup();
    v
}

/// Why a module's binary cannot be trusted for symbolization, if it can't.
fn check_binary(path: &Path, want: Option<&[u8]>) -> Option<String> {
    let want = want?;
    match blazesym::helper::read_elf_build_id(&path) {
        Ok(Some(have)) if have.as_ref() == want => None,
        Ok(Some(have)) => Some(format!(
            "build-id mismatch (ring {}, file {})",
            hex(want),
            hex(&have)
        )),
        Ok(None) => Some("the file on disk has no build-id".into()),
        // Not the parser's message: it may quote the file's first bytes.
        Err(_) => Some("not a readable ELF file".into()),
    }
}

/// The GNU build-ids of `modules` (paths as process `view` sees them,
/// read through its `/proc/VIEW/root`; `None`: as they are here, for a
/// process gone), as lowercase hex: what a pprof mapping names a binary
/// by. A module unreadable or without a build-id is left out.
pub(crate) fn build_ids(view: Option<u32>, modules: &[String]) -> HashMap<String, String> {
    use object::{Object, read::ReadCache};
    modules
        .iter()
        .filter_map(|m| {
            let path = match view {
                Some(pid) => format!("/proc/{pid}/root{m}"),
                None => m.clone(),
            };
            let f = std::fs::File::open(path).ok()?;
            let cache = ReadCache::new(f);
            let elf = object::File::parse(&cache).ok()?;
            let id = elf.build_id().ok().flatten()?;
            Some((m.clone(), hex(id)))
        })
        .collect()
}

/// Lowercase hex of a byte string (build-ids).
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn bare(addr: u64) -> Frame {
    Frame {
        addr,
        ..Frame::default()
    }
}

fn module_only(addr: u64, module: &str, off: u64) -> Frame {
    Frame {
        addr,
        module: Some(module.to_string()),
        module_offset: Some(off),
        ..Frame::default()
    }
}

/// The frame of `addr`, at virtual address `vaddr` of Go binary `go`:
/// the function whose code it is, with the functions inlined there
/// (outermost first, as DWARF's are shown), from the binary's
/// `.gopclntab`. `None` when no Go function holds it.
fn go_frame(go: &gopclntab::GoBinary, addr: u64, vaddr: u64, module: &str) -> Option<Frame> {
    let mut frames = go.frames_at(vaddr);
    let outer = frames.pop()?;
    let known = outer.line != 0;
    Some(Frame {
        addr,
        function: Some(outer.function),
        file: known.then_some(outer.file),
        line: known.then_some(outer.line),
        module: Some(module.to_string()),
        // Without a line, the offset in the function tells places apart.
        function_offset: if known {
            None
        } else {
            go.func_at(vaddr).map(|f| vaddr - f.entry)
        },
        inlined: frames
            .into_iter()
            .rev()
            .map(|g| InlinedFrame {
                function: g.function,
                line: (g.line != 0).then_some(g.line),
                file: Some(g.file),
            })
            .collect(),
        ..Frame::default()
    })
}

fn to_frame(addr: u64, s: &Symbolized<'_>, module: Option<(&str, u64)>) -> Frame {
    let Some(sym) = s.as_sym() else {
        return match module {
            Some((m, off)) => module_only(addr, m, off),
            None => bare(addr),
        };
    };
    let (file, line) = match &sym.code_info {
        Some(ci) => (Some(ci.to_path().display().to_string()), ci.line),
        None => (None, None),
    };
    Frame {
        addr,
        function: Some(sym.name.to_string()),
        file,
        line,
        module: sym
            .module
            .as_ref()
            .map(|m| m.to_string_lossy().into_owned()),
        module_offset: None,
        // Without a line, the offset in the function tells places apart.
        function_offset: sym.code_info.is_none().then_some(sym.offset as u64),
        inlined: sym
            .inlined
            .iter()
            .map(|i| InlinedFrame {
                function: i.name.to_string(),
                file: i
                    .code_info
                    .as_ref()
                    .map(|c| c.to_path().display().to_string()),
                line: i.code_info.as_ref().and_then(|c| c.line),
            })
            .collect(),
        ..Frame::default()
    }
}

/// The symbolize stage: fills every frame of a report — user locations
/// through `space`, kernel stacks through kallsyms — symbolizing each
/// distinct address once, and appends warnings to the report.
pub(crate) fn fill(
    report: &mut crate::model::Report,
    space: &UserSpace<'_>,
    sym: &mut dyn Resolve,
) {
    let mut user = Vec::new();
    let mut kernel = Vec::new();
    // Threads share their kernel stacks: each distinct one's addresses once.
    let mut stacks = std::collections::HashSet::new();
    for t in &report.threads {
        user.extend(t.location.iter().chain(&t.history).map(|l| l.frame.addr));
        if stacks.insert(t.kernel_stack.as_ptr()) {
            kernel.extend(t.kernel_stack.iter().map(|f| f.addr));
        }
    }
    user.extend(crate::collect::runtime::native_addrs(&report.tasks));
    let user = crate::util::timing::phase("  user addresses", || sym.user(space, &user));
    let kernel = if kernel.is_empty() {
        HashMap::new()
    } else {
        crate::util::timing::phase("  kernel addresses", || sym.kernel(&kernel))
    };
    let put = |f: &mut Frame, table: &HashMap<u64, Frame>| {
        if let Some(s) = table.get(&f.addr) {
            *f = s.clone();
        }
    };
    for t in &mut report.threads {
        for l in t.location.iter_mut().chain(t.history.iter_mut()) {
            put(&mut l.frame, &user);
        }
    }
    report.map_kernel_frames(|f| put(f, &kernel));
    crate::collect::runtime::name_frames(&mut report.tasks, &user);
    report.warnings.extend(sym.take_warnings());
}

/// Names the snaps of a timeline (`record`) through `space`, each
/// distinct address once, and appends the symbolizer's warnings to it.
pub(crate) fn fill_snaps(
    t: &mut crate::model::events::Timeline,
    space: &UserSpace<'_>,
    sym: &mut dyn Resolve,
) {
    let addrs: Vec<u64> = t
        .threads
        .iter()
        .flat_map(|th| th.snaps.iter().map(|m| m.addr))
        .collect();
    if addrs.is_empty() {
        return;
    }
    let named = crate::util::timing::phase("  snap addresses", || sym.user(space, &addrs));
    for m in t.threads.iter_mut().flat_map(|th| th.snaps.iter_mut()) {
        if let Some(f) = named.get(&m.addr) {
            m.what = f.describe();
        }
    }
    t.warnings.extend(sym.take_warnings());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(path: &str, start: u64, end: u64, file_offset: u64) -> ModuleMap {
        ModuleMap {
            path: PathBuf::from(path),
            start,
            end,
            file_offset,
            build_id: None,
            root: None,
        }
    }

    #[test]
    fn generated_code_is_anonymous_or_memfd_code_not_the_kernels() {
        let line = |perms: &str, name: &str| MapsLine {
            start: 0x1000,
            end: 0x2000,
            perms: perms.into(),
            offset: 0,
            dev: (0, 0),
            inode: 0,
            name: name.into(),
            deleted: false,
        };
        assert!(is_generated_code(&line("rwxp", "")));
        assert!(is_generated_code(&line("r-xp", "[anon:v8]")));
        assert!(is_generated_code(&line("r-xs", "/memfd:jit")));
        assert!(!is_generated_code(&line("rw-p", "")));
        assert!(!is_generated_code(&line("r-xp", "[vdso]")));
        assert!(!is_generated_code(&line("--xp", "[vsyscall]")));
        assert!(!is_generated_code(&line("r-xp", "[uprobes]")));
    }

    #[test]
    fn overlapping_modules_the_later_wins() {
        let mods = [
            module("/a", 0x1000, 0x5000, 0),
            module("/b", 0x2000, 0x3000, 0),
            module("/c", 0x4800, 0x6000, 0),
        ];
        let ix = ModuleIndex::new(&mods);
        let got: Vec<_> = [
            0xfff, 0x1000, 0x2000, 0x2fff, 0x3000, 0x47ff, 0x4800, 0x5fff, 0x6000,
        ]
        .map(|a| ix.find(a))
        .to_vec();
        assert_eq!(
            got,
            [
                None,
                Some(0),
                Some(1),
                Some(1),
                Some(0),
                Some(0),
                Some(2),
                Some(2),
                None
            ]
        );
    }

    #[test]
    fn an_overflowing_file_offset_is_a_bare_frame_and_a_warning() {
        let mods = [module("/nonexistent/lib.so", 0x1000, 0x2000, u64::MAX - 4)];
        let mut s = Symbolizer::new();
        let got = s.user(&UserSpace::Modules(&mods), &[0x1010]);
        assert_eq!(got[&0x1010].module_offset, None);
        let w = s.take_warnings();
        assert!(w.iter().any(|w| w.contains("overflows")), "{w:?}");
    }

    #[test]
    fn a_fifo_or_a_secret_behind_a_symlink_neither_hangs_nor_leaks() {
        let dir = std::env::temp_dir().join(format!("rip-sym-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let fifo = dir.join("fifo.so");
        let secret = dir.join("secret");
        std::fs::write(&secret, b"root:$y$SECRET").unwrap();
        let link = dir.join("link.so");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let mods = [
            ModuleMap {
                build_id: Some(vec![1, 2, 3, 4]),
                ..module(fifo.to_str().unwrap(), 0x1000, 0x2000, 0)
            },
            ModuleMap {
                build_id: Some(vec![1, 2, 3, 4]),
                ..module(link.to_str().unwrap(), 0x3000, 0x4000, 0)
            },
        ];
        let mut s = Symbolizer::new();
        let got = s.user(&UserSpace::Modules(&mods), &[0x1010, 0x3010]);
        assert_eq!(got.len(), 2);
        let w = s.take_warnings().join("\n");
        assert!(w.contains("FIFO"), "{w}");
        assert!(!w.contains("root") && !w.contains("SECRET"), "{w}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A program at `path` built from one C function named `name`,
    /// started: its pid and the function's address, as it prints them.
    fn program_named(dir: &Path, path: &Path, name: &str) -> (std::process::Child, u64) {
        use std::io::BufRead;
        let src = dir.join("one.c");
        std::fs::write(
            &src,
            "#include <stdio.h>\n#include <unistd.h>\n\
             __attribute__((noinline)) void NAME(void) { pause(); }\n\
             int main(void) { printf(\"%p\\n\", (void *)NAME); fflush(stdout); NAME(); }\n",
        )
        .unwrap();
        // Built beside, then written over `path` in place: the same
        // device and inode, other contents.
        let built = dir.join("built");
        let cc = std::process::Command::new("cc")
            .args(["-O0", "-g", &format!("-DNAME={name}"), "-o"])
            .arg(&built)
            .arg(&src)
            .status()
            .expect("cc runs");
        assert!(cc.success());
        std::fs::write(path, std::fs::read(&built).unwrap()).unwrap();
        // Another test's fork may hold the write descriptor for a moment
        // (until it execs): the file is busy then.
        let mut tries = 0;
        let mut child = loop {
            match std::process::Command::new(path)
                .stdout(std::process::Stdio::piped())
                .spawn()
            {
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                r => break r.unwrap(),
            }
        };
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = u64::from_str_radix(line.trim().trim_start_matches("0x"), 16).unwrap();
        (child, addr)
    }

    /// One symbolizer kept across targets (as serve keeps it) names a
    /// program rewritten in place at the same path (same inode) by its new
    /// contents, whether or not the old target's state was dropped; and a
    /// target gone leaves nothing held.
    #[test]
    fn a_kept_symbolizer_names_a_rewritten_binary_by_its_new_contents() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("rip-sym-kept-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("app");
        std::fs::write(&path, b"").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut s = Symbolizer::new();
        let mut name_of = |pid: u32, addr: u64| {
            s.user(&UserSpace::Live(pid), &[addr])[&addr]
                .function
                .clone()
        };
        let run = |name: &str, s_name: &mut dyn FnMut(u32, u64) -> Option<String>| {
            let (mut child, addr) = program_named(&dir, &path, name);
            let got = s_name(child.id(), addr);
            child.kill().unwrap();
            child.wait().unwrap();
            got
        };
        assert_eq!(
            run("version_one", &mut name_of).as_deref(),
            Some("version_one")
        );
        // Not dropped: the new contents have another key.
        assert_eq!(
            run("version_two", &mut name_of).as_deref(),
            Some("version_two")
        );
        assert_eq!(s.holders(), 2);
        s.retain_targets(|_| false);
        assert_eq!(s.holders(), 0);
        let mut name_of = |pid: u32, addr: u64| {
            s.user(&UserSpace::Live(pid), &[addr])[&addr]
                .function
                .clone()
        };
        assert_eq!(
            run("version_three", &mut name_of).as_deref(),
            Some("version_three")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_hundred_thousand_modules_and_four_hundred_thousand_addresses() {
        // The debug profile is opt-level 1: the work is the release test's.
        let mods: Vec<ModuleMap> = (0..100_000u64)
            .map(|i| {
                module(
                    "/nonexistent/lib.so",
                    0x10_0000 + i * 0x1000,
                    0x10_0000 + i * 0x1000 + 0x800,
                    0,
                )
            })
            .collect();
        let addrs: Vec<u64> = (0..400_000u64)
            .map(|i| 0x10_0000 + (i % 100_000) * 0x1000 + (i / 100_000) * 0x100)
            .collect();
        // This thread's CPU time, which a busy machine does not lengthen
        // (the symbolizer works on the calling thread).
        let cpu = || {
            let mut t = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: a valid timespec to fill.
            let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
            assert_eq!(rc, 0);
            std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
        };
        let t = cpu();
        let got = Symbolizer::new().user(&UserSpace::Modules(&mods), &addrs);
        let took = cpu() - t;
        assert_eq!(got.len(), 400_000);
        eprintln!("100,000 modules × 400,000 addresses: {took:?} of CPU");
        // Under a second here (0.35–0.74 s in a debug build); a linear
        // scan per address (4·10¹⁰ comparisons) took minutes. The bound
        // catches that, in CPU time, which load does not add to.
        assert!(took < std::time::Duration::from_secs(20), "took {took:?}");
    }
}
