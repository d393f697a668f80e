//! Unwind information of the binaries a process has mapped: which
//! mappings hold code, and, per binary, its CFI sections (`.eh_frame`,
//! `.eh_frame_hdr`, `.debug_frame`) with their stated addresses.
//!
//! Binaries are opened only through `/proc/PID/map_files/START-END`, which
//! names exactly the inode the process mapped, whatever path the process
//! may have put in its place since (root only), and only if it is a regular
//! file. Each binary is parsed once per run, keyed by its device and inode,
//! and shared by every mapping and thread that uses it. Every size and
//! offset read from a file is bounded: a binary is input like any other.

use std::{
    collections::HashMap,
    fs::File,
    ops::Range,
    sync::Arc,
    time::{Duration, Instant},
};

use librip::reader::{Follow, MapsLine, RegularFile};
use object::{
    Object, ObjectSection, ReadCache,
    elf::{PF_X, PT_LOAD},
    read::elf::{ElfFile64, ProgramHeader},
};

use crate::discover::maps::ProcessMaps;

/// Largest CFI section read from a binary. Big programs (browsers) have
/// `.eh_frame` sections of tens of MiB; anything larger is not a binary
/// worth trusting with memory.
const MAX_SECTION: u64 = 256 << 20;

/// Largest number of program headers looked at.
const MAX_SEGMENTS: usize = 256;

/// One code mapping of the process (`r-x`), from /proc/PID/maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeMapping {
    /// First mapped address.
    pub start: u64,
    /// One past the last mapped address.
    pub end: u64,
    /// File offset mapped at `start`.
    pub offset: u64,
    /// Device (major, minor) and inode of the mapped file; inode 0 for
    /// anonymous code (JIT, the vDSO).
    pub dev: (u32, u32),
    /// Inode of the mapped file (0: anonymous).
    pub inode: u64,
    /// Path as /proc/PID/maps shows it (for names only: never opened).
    pub name: String,
    /// The file was unlinked since it was mapped (still readable through
    /// map_files: it is the mapped inode).
    pub deleted: bool,
}

impl CodeMapping {
    fn from_maps(m: &MapsLine) -> CodeMapping {
        CodeMapping {
            start: m.start,
            end: m.end,
            offset: m.offset,
            dev: m.dev,
            inode: m.inode,
            name: m.name.clone(),
            deleted: m.deleted,
        }
    }

    /// `/proc/PID/map_files/START-END`.
    fn map_files(&self, pid: u32) -> String {
        format!("/proc/{pid}/map_files/{:x}-{:x}", self.start, self.end)
    }
}

/// A binary's unwind information, parsed once and shared.
#[derive(Debug)]
pub struct ModuleData {
    /// `.eh_frame` and its stated address range.
    pub eh_frame: Option<(Range<u64>, Arc<[u8]>)>,
    /// `.eh_frame_hdr` (the binary-search index of `.eh_frame`).
    pub eh_frame_hdr: Option<(Range<u64>, Arc<[u8]>)>,
    /// `.debug_frame` (DWARF CFI of binaries built without `.eh_frame`).
    pub debug_frame: Option<Arc<[u8]>>,
    /// `.text` address range (relative-to-text pointer encodings).
    pub text: Option<Range<u64>>,
    /// `.got` address range (relative-to-GOT pointer encodings).
    pub got: Option<Range<u64>>,
    /// Loadable segments: (file offset, stated address, file size, flags).
    segments: Vec<(u64, u64, u64, u32)>,
}

impl ModuleData {
    /// Whether there is any CFI at all (else unwinding in this binary falls
    /// back to frame pointers).
    #[cfg(test)]
    pub fn has_cfi(&self) -> bool {
        self.eh_frame.is_some() || self.debug_frame.is_some()
    }

    /// The load bias of the mapping `m` of this binary: what to add to the
    /// binary's stated addresses (SVMAs) to get the process's addresses
    /// (AVMAs). 0 for a non-PIE executable; the load address of a PIE
    /// executable or a shared library. Computed from the loadable segment
    /// that holds the mapping's file offset, so it is right whichever of
    /// the binary's mappings is given. `None` when no segment does.
    pub fn bias(&self, m: &CodeMapping) -> Option<u64> {
        let len = m.end.checked_sub(m.start)?;
        let map_end = m.offset.checked_add(len)?;
        let &(p_offset, p_vaddr, _, _) = self
            .segments
            .iter()
            .filter(|s| s.3 & PF_X != 0)
            .chain(&self.segments)
            .find(|&&(off, _, size, _)| off < map_end && off.saturating_add(size) > m.offset)?;
        // The file offset X is at address m.start + X - m.offset, and at
        // bias + p_vaddr for X = p_offset. Wrapping: the terms may cross
        // zero on the way, the result does not if the binary is sane.
        let bias = m
            .start
            .wrapping_add(p_offset)
            .wrapping_sub(m.offset)
            .wrapping_sub(p_vaddr);
        (bias <= m.start).then_some(bias)
    }
}

/// A mapped file's identity: device (major, minor) and inode.
type FileId = ((u32, u32), u64);

/// The code mappings of a process and the unwind information of the
/// binaries behind them, loaded on first use.
pub struct Modules {
    pid: u32,
    /// Code mappings, sorted by start address.
    code: Vec<CodeMapping>,
    /// (device, inode) → parsed binary, or `None` if it could not be used
    /// (not a regular file, not ELF, gone): tried once per run.
    binaries: HashMap<FileId, Option<Arc<ModuleData>>>,
    /// Where the kernel answers for one address at a time, the code
    /// mappings are asked for as stacks reach them (see [`Asker`]);
    /// `None`: they are listed.
    asker: Option<Asker>,
}

/// Questions asked of the kernel, one address at a time, before the code
/// mappings are listed instead.
///
/// Listing them makes the kernel step over every mapping of the process,
/// and a process of 100,000 threads has 200,000 (each thread's stack and
/// guard page): one listing took 80 ms there. Stacks reach a few code
/// mappings, each found by one lookup; an address that is not code (a
/// garbage return address) costs one too, so past this many the mappings
/// are listed after all.
const MAX_QUESTIONS: u32 = 1024;

/// How long an address found to be no code is believed (code may be
/// mapped there later).
const NOT_CODE_FOR: Duration = Duration::from_millis(250);

/// The kernel's answers so far (see [`Modules::ask`]).
struct Asker {
    maps: ProcessMaps,
    /// Ranges that hold no code, sorted by start (a mapping that is not
    /// code, or the gap around an address no mapping holds).
    not_code: Vec<Range<u64>>,
    /// When `not_code` was started.
    since: Instant,
    questions: u32,
}

impl Modules {
    /// The process's code mappings: asked of the kernel one at a time as
    /// stacks reach them where it answers so (Linux 6.11), else listed now
    /// (without reading the whole /proc/PID/maps where the kernel lists
    /// them itself). Binaries are not opened yet.
    pub fn new(pid: u32) -> std::io::Result<Modules> {
        let maps = ProcessMaps::open(pid)?;
        if maps.answers_one_by_one() {
            let mut m = Modules::from_maps(pid, &[]);
            m.asker = Some(Asker {
                maps,
                not_code: Vec::new(),
                since: Instant::now(),
                questions: 0,
            });
            return Ok(m);
        }
        Ok(Modules::from_maps(pid, &maps.executable()?))
    }

    /// The modules of `pid` as `maps` describes its mappings (for tests, and
    /// for callers that already read the maps).
    pub fn from_maps(pid: u32, maps: &[MapsLine]) -> Modules {
        let mut code: Vec<CodeMapping> = maps
            .iter()
            .filter(|m| m.is_exec())
            .map(CodeMapping::from_maps)
            .collect();
        code.sort_by_key(|m| m.start);
        Modules {
            pid,
            code,
            binaries: HashMap::new(),
            asker: None,
        }
    }

    /// Lists the code mappings again (code loaded since, `dlopen`),
    /// keeping the binaries parsed so far.
    pub fn refresh(&mut self) -> std::io::Result<()> {
        let code = ProcessMaps::open(self.pid)?.executable()?;
        self.code = Modules::from_maps(self.pid, &code).code;
        self.asker = None;
        Ok(())
    }

    /// Whether `addr` is in a code mapping, asking the kernel about it if
    /// it is in none known (the mapping found is kept). `None`: the
    /// mappings are listed, not asked for (see [`Self::refresh`]).
    pub fn ask(&mut self, addr: u64) -> Option<bool> {
        if self.mapping_of(addr).is_some() {
            return Some(true);
        }
        let asker = self.asker.as_mut()?;
        if asker.since.elapsed() > NOT_CODE_FOR {
            asker.not_code.clear();
            asker.since = Instant::now();
        }
        let i = asker.not_code.partition_point(|r| r.start <= addr);
        if i > 0 && asker.not_code[i - 1].contains(&addr) {
            return Some(false);
        }
        if asker.questions >= MAX_QUESTIONS {
            // Listing costs less than more questions from here.
            self.refresh().ok()?;
            return Some(self.mapping_of(addr).is_some());
        }
        asker.questions += 1;
        match asker.maps.containing(addr).ok()? {
            Some(m) if m.is_exec() => {
                let c = CodeMapping::from_maps(&m);
                let at = self.code.partition_point(|k| k.start < c.start);
                // A mapping replaced since (same start) gives way.
                if self.code.get(at).is_some_and(|k| k.start == c.start) {
                    self.code[at] = c;
                } else {
                    self.code.insert(at, c);
                }
                Some(self.mapping_of(addr).is_some())
            }
            other => {
                // The mapping that is not code, or the page of an
                // address no mapping holds.
                let r = other.map_or(addr & !0xfff..(addr | 0xfff).saturating_add(1), |m| {
                    m.start..m.end
                });
                let at = asker.not_code.partition_point(|k| k.start < r.start);
                asker.not_code.insert(at, r);
                Some(false)
            }
        }
    }

    /// The code mapping holding `addr`, among those known.
    pub fn mapping_of(&self, addr: u64) -> Option<&CodeMapping> {
        let i = self.code.partition_point(|m| m.start <= addr);
        let m = self.code.get(i.checked_sub(1)?)?;
        (addr < m.end).then_some(m)
    }

    /// The unwind information of the binary mapped by `m`, parsed on first
    /// use. `None` for anonymous code and for files that are not readable
    /// ELF binaries.
    pub fn binary(&mut self, m: &CodeMapping) -> Option<Arc<ModuleData>> {
        if m.inode == 0 {
            return None;
        }
        let pid = self.pid;
        self.binaries
            .entry((m.dev, m.inode))
            // None: no unwind information (not an ELF file, unreadable);
            // frames there fall back to frame pointers.
            .or_insert_with(|| load(pid, m).map(Arc::new))
            .clone()
    }

    /// Binaries parsed (or tried) so far.
    pub fn binaries_loaded(&self) -> usize {
        self.binaries.len()
    }
}

/// Opens the file behind `m` through map_files and parses it.
fn load(pid: u32, m: &CodeMapping) -> Option<ModuleData> {
    let f = RegularFile::open(std::path::Path::new(&m.map_files(pid)), Follow::Yes).ok()?;
    parse(File::from(f.fd().try_clone_to_owned().ok()?))
}

/// Parses the unwind sections of the ELF file `f`. Section data is read
/// with `pread` through [`ReadCache`], never mapped: a file truncated
/// under us is an error, not a SIGBUS.
pub fn parse(f: File) -> Option<ModuleData> {
    let cache = ReadCache::new(f);
    let elf = ElfFile64::<object::LittleEndian, _>::parse(&cache).ok()?;
    let endian = elf.endian();
    let segments = elf
        .elf_program_headers()
        .iter()
        .take(MAX_SEGMENTS)
        .filter(|p| p.p_type(endian) == PT_LOAD)
        .map(|p| {
            (
                p.p_offset(endian),
                p.p_vaddr(endian),
                p.p_filesz(endian),
                p.p_flags(endian),
            )
        })
        .collect::<Vec<_>>();
    if segments.is_empty() {
        return None;
    }
    let range = |name: &str| {
        let s = elf.section_by_name(name)?;
        Some(s.address()..s.address().checked_add(s.size())?)
    };
    let data = |name: &str| -> Option<Arc<[u8]>> {
        let s = elf.section_by_name(name)?;
        if s.size() > MAX_SECTION {
            return None;
        }
        // NOBITS or compressed sections are not CFI the unwinder can use.
        s.compressed_file_range()
            .ok()
            .filter(|r| r.format == object::CompressionFormat::None)?;
        Some(Arc::from(s.data().ok().filter(|d| !d.is_empty())?))
    };
    let with_range = |name: &str| Some((range(name)?, data(name)?));
    let eh_frame = with_range(".eh_frame");
    let eh_frame_hdr = eh_frame.as_ref().and_then(|(frame, _)| {
        with_range(".eh_frame_hdr").filter(|(at, hdr)| hdr_is_sound(at.start, hdr, frame))
    });
    Some(ModuleData {
        eh_frame_hdr,
        // framehop reads .debug_frame only where .eh_frame is missing:
        // don't read (possibly large) debug sections it would not use.
        debug_frame: if eh_frame.is_none() {
            data(".debug_frame")
        } else {
            None
        },
        eh_frame,
        text: range(".text"),
        got: range(".got"),
        segments,
    })
}

/// Whether an `.eh_frame_hdr` at stated address `at` is the standard
/// layout (version 1, `.eh_frame` pointer pc-relative, count as udata4,
/// table of data-relative sdata4 pairs) and every FDE it points to is
/// inside `.eh_frame` (`eh_frame`, stated addresses).
///
/// gimli trusts the table's pointers (it subtracts them from the section's
/// address unchecked), so a hostile table is dropped here; framehop then
/// indexes `.eh_frame` itself, which costs a pass over it and nothing
/// else. One pass over the table per binary.
fn hdr_is_sound(at: u64, hdr: &[u8], eh_frame: &Range<u64>) -> bool {
    let word = |off: usize| -> Option<i64> {
        let b = hdr.get(off..off.checked_add(4)?)?;
        Some(i32::from_le_bytes(b.try_into().ok()?) as i64)
    };
    if hdr.get(..4) != Some(&[1, 0x1b, 0x03, 0x3b][..]) {
        return false;
    }
    let (Some(frame_rel), Some(count)) = (word(4), word(8)) else {
        return false;
    };
    let frame_ptr = at.wrapping_add(4).wrapping_add(frame_rel as u64);
    let count = count as u32 as usize;
    if frame_ptr != eh_frame.start
        || count.checked_mul(8).and_then(|n| n.checked_add(12)) > Some(hdr.len())
    {
        return false;
    }
    let mut last = i64::MIN;
    (0..count).all(|i| {
        let (Some(loc), Some(fde)) = (word(12 + i * 8), word(16 + i * 8)) else {
            return false;
        };
        let fde = at.wrapping_add(fde as u64);
        let sorted = loc >= last;
        last = loc;
        sorted && eh_frame.contains(&fde)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use librip::reader::parse_maps;

    /// Where the kernel answers one address at a time, code mappings are
    /// found as they are asked for, each once; addresses that are no code
    /// are answered without a question the second time; and past
    /// [`MAX_QUESTIONS`] the mappings are listed instead.
    #[test]
    fn code_mappings_are_asked_for_one_address_at_a_time() {
        let pid = std::process::id();
        let mut m = Modules::new(pid).unwrap();
        let Some(asker) = &m.asker else {
            // A kernel before 6.11: listed, as before.
            assert!(!m.code.is_empty());
            return;
        };
        assert_eq!(asker.questions, 0);
        assert!(m.code.is_empty(), "nothing is listed up front");
        let code = code_mappings_are_asked_for_one_address_at_a_time as *const () as u64;
        assert_eq!(m.ask(code), Some(true));
        assert_eq!(m.ask(code + 1), Some(true));
        let text = parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let want = text
            .iter()
            .find(|l| l.start <= code && code < l.end)
            .unwrap();
        let got = m.mapping_of(code).unwrap();
        assert_eq!(
            (got.start, got.end, got.inode),
            (want.start, want.end, want.inode)
        );
        let data = 0u64;
        let data = &raw const data as u64;
        assert_eq!(m.ask(data), Some(false));
        let asked = m.asker.as_ref().unwrap().questions;
        assert_eq!(asked, 2, "one question for the code, one for the stack");
        assert_eq!(m.ask(data + 8), Some(false));
        assert_eq!(
            m.asker.as_ref().unwrap().questions,
            asked,
            "answered from what is known"
        );
        // Unmapped pages, each a question, until the mappings are listed.
        let mut page = 0x1000u64;
        while m.asker.is_some() {
            assert_eq!(m.ask(page), Some(false));
            page += 0x1000;
            assert!(page < 0x1000 * u64::from(MAX_QUESTIONS + 8));
        }
        assert!(m.mapping_of(code).is_some(), "listed: the code is there");
        assert!(m.code.len() > 1);
    }

    fn maps_line(start: u64, end: u64, name: &str, inode: u64) -> MapsLine {
        let text = format!("{start:x}-{end:x} r-xp 00000000 fe:00 {inode} {name}\n");
        parse_maps(&text).remove(0)
    }

    /// Our own executable: a mapping of it gives unwind information, and
    /// the bias turns a function's stated address into its real one.
    #[test]
    fn our_own_executable_and_its_bias() {
        let maps = parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let mut mods = Modules::from_maps(std::process::id(), &maps);
        let here = our_own_executable_and_its_bias as *const () as usize as u64;
        let m = mods.mapping_of(here).expect("our code is mapped").clone();
        let data = mods.binary(&m).expect("our executable parses");
        assert!(data.eh_frame.is_some() && data.eh_frame_hdr.is_some());
        let bias = data.bias(&m).expect("bias");
        let text = data.text.clone().expect(".text");
        assert!(
            (text.start + bias..text.end + bias).contains(&here),
            "{here:#x} in .text {text:x?} + {bias:#x}"
        );
        // Parsed once, whatever the number of lookups.
        assert_eq!(mods.binaries_loaded(), 1);
        let again = mods.binary(&m).unwrap();
        assert!(Arc::ptr_eq(&data, &again));
    }

    /// A code mapping of a file that is not ELF (here: a shell script's
    /// text, mapped executable) has no module, and nothing panics.
    #[test]
    fn a_mapping_of_a_non_elf_file_has_no_module() {
        let path = std::env::temp_dir().join(format!("rip-notelf-{}", std::process::id()));
        std::fs::write(&path, b"#!/bin/sh\necho not an ELF file\n".repeat(200)).unwrap();
        let f = File::open(&path).unwrap();
        let p = crate::collect::exec_mapping::ExecMapping::of(&f);
        let maps = parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let mut mods = Modules::from_maps(std::process::id(), &maps);
        let m = mods.mapping_of(p.addr()).expect("mapped").clone();
        assert!(mods.binary(&m).is_none());
        drop(p);
        std::fs::remove_file(&path).unwrap();
        // Garbage that starts like ELF, and an empty file, parse to nothing.
        for bytes in [
            &b"\x7fELF\x02\x01\x01\0garbage"[..],
            b"",
            &[0xffu8; 4096][..],
        ] {
            std::fs::write(&path, bytes).unwrap();
            assert!(parse(File::open(&path).unwrap()).is_none());
        }
        std::fs::remove_file(&path).unwrap();
    }

    /// A maps line whose file cannot be opened through map_files (a deleted
    /// file no longer mapped, a line from a stale read) has no module;
    /// neither does anonymous code.
    #[test]
    fn a_deleted_or_vanished_file_has_no_module() {
        let maps = [
            maps_line(0x1000, 0x2000, "/tmp/gone.so (deleted)", 4242),
            maps_line(0x3000, 0x4000, "/usr/lib/x.so", 4343),
            maps_line(0x5000, 0x6000, "", 0),
        ];
        let mut mods = Modules::from_maps(std::process::id(), &maps);
        for addr in [0x1000, 0x3fff, 0x5000] {
            let m = mods.mapping_of(addr).unwrap().clone();
            assert!(mods.binary(&m).is_none(), "{addr:#x}");
        }
        assert!(mods.mapping_of(0x2000).is_none());
        assert!(mods.mapping_of(0).is_none());
        assert!(mods.mapping_of(u64::MAX).is_none());
    }

    /// A file deleted while mapped is still the mapped inode: map_files
    /// opens it, so it still unwinds (binaries replaced by a package
    /// upgrade under a running service are common).
    #[test]
    fn a_file_deleted_while_mapped_is_read_through_map_files() {
        let me = std::fs::read("/proc/self/exe").unwrap();
        let path = std::env::temp_dir().join(format!("rip-deleted-{}", std::process::id()));
        std::fs::write(&path, &me).unwrap();
        let f = File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let p = crate::collect::exec_mapping::ExecMapping::of(&f);
        let maps = parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let mut mods = Modules::from_maps(std::process::id(), &maps);
        let m = mods.mapping_of(p.addr()).expect("mapped").clone();
        assert!(m.deleted, "{m:?}");
        let data = mods.binary(&m);
        drop(p);
        assert!(data.is_some_and(|d| d.has_cfi()));
    }

    #[test]
    fn eh_frame_hdr_checks() {
        let frame = 0x2000..0x3000;
        // version, encodings, eh_frame_ptr (pcrel from 0x1004), count 2,
        // then (initial location, FDE) pairs relative to 0x1000.
        let mut hdr = vec![1u8, 0x1b, 0x03, 0x3b];
        hdr.extend((0x2000i32 - 0x1004).to_le_bytes());
        hdr.extend(2i32.to_le_bytes());
        for (loc, fde) in [(0x10i32, 0x1000i32), (0x20, 0x1100)] {
            hdr.extend(loc.to_le_bytes());
            hdr.extend(fde.to_le_bytes());
        }
        assert!(hdr_is_sound(0x1000, &hdr, &frame));
        // An FDE pointer before .eh_frame (gimli would underflow).
        let mut bad = hdr.clone();
        bad[16..20].copy_from_slice(&(-0x10i32).to_le_bytes());
        assert!(!hdr_is_sound(0x1000, &bad, &frame));
        // A count past the end, an unsorted table, another encoding, a
        // truncated header.
        let mut bad = hdr.clone();
        bad[8..12].copy_from_slice(&(-1i32).to_le_bytes());
        assert!(!hdr_is_sound(0x1000, &bad, &frame));
        let mut bad = hdr.clone();
        bad[20..24].copy_from_slice(&0x5i32.to_le_bytes());
        assert!(!hdr_is_sound(0x1000, &bad, &frame));
        let mut bad = hdr.clone();
        bad[3] = 0x1b;
        assert!(!hdr_is_sound(0x1000, &bad, &frame));
        assert!(!hdr_is_sound(0x1000, &hdr[..10], &frame));
        assert!(!hdr_is_sound(0x1000, &[], &frame));
    }

    #[test]
    fn bias_of_pie_and_non_pie_layouts() {
        let data = |segments| ModuleData {
            eh_frame: None,
            eh_frame_hdr: None,
            debug_frame: None,
            text: None,
            got: None,
            segments,
        };
        let m = |start, end, offset| CodeMapping {
            start,
            end,
            offset,
            dev: (0, 0),
            inode: 1,
            name: String::new(),
            deleted: false,
        };
        // Non-PIE: text segment at 0x401000, file offset 0x1000.
        let exe = data(vec![(0, 0x400000, 0x500, 4), (0x1000, 0x401000, 0x2000, 5)]);
        assert_eq!(exe.bias(&m(0x401000, 0x403000, 0x1000)), Some(0));
        // PIE / shared library: segment addresses from 0, loaded high; the
        // segment's offset is not page aligned (the mapping's is).
        let lib = data(vec![(0, 0, 0x28000, 4), (0x28f00, 0x29f00, 0x15000, 5)]);
        assert_eq!(
            lib.bias(&m(0x7f00_0002_9000, 0x7f00_0003_e000, 0x28000)),
            Some(0x7f00_0000_0000)
        );
        // A mapping beyond every segment, and a bias that would be
        // "negative": none.
        assert_eq!(lib.bias(&m(0x1000, 0x2000, 0x100000)), None);
        assert_eq!(lib.bias(&m(0x1000, 0x2000, 0x28000)), None);
        // An absurd mapping (end before start) does not panic.
        assert_eq!(lib.bias(&m(0x2000, 0x1000, 0)), None);
    }
}
