//! A process's memory map, asked of the kernel the cheapest way it offers:
//! which mappings are files, which are code, which holds an address.
//!
//! /proc/PID/maps holds two lines per thread (its stack and guard page):
//! 200,000 lines for 100,000 threads, which the kernel takes a fifth of a
//! second to print and the reader as long to parse. Readers want far less:
//! the file-backed mappings (rings, binaries), or the one mapping that
//! holds an address. Linux 6.11's `PROCMAP_QUERY` ioctl answers exactly
//! that, one mapping per call, skipping the anonymous ones in the kernel.
//! On older kernels the text is read and parsed, once per [`ProcessMaps`].

use std::{
    fs::File,
    io::{self, Read},
    os::fd::AsRawFd,
    sync::OnceLock,
};

use librip::reader::{MapsLine, parse_maps};

/// `_IOWR('f', 17, struct procmap_query)` (uapi/linux/fs.h).
const PROCMAP_QUERY: libc::c_ulong = 0xC068_6611;
/// Mapping flags, in `query_flags` (to filter) and `vma_flags` (answer).
const VMA_READABLE: u64 = 0x01;
const VMA_WRITABLE: u64 = 0x02;
const VMA_EXECUTABLE: u64 = 0x04;
const VMA_SHARED: u64 = 0x08;
/// Answer with the first mapping at or after the address.
const COVERING_OR_NEXT_VMA: u64 = 0x10;
/// Only file-backed mappings.
const FILE_BACKED_VMA: u64 = 0x20;
/// Longest name asked for; a longer one is ENAMETOOLONG and the text is
/// read instead.
const NAME_MAX: usize = 4096;

/// `struct procmap_query` (uapi/linux/fs.h).
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

/// One process's memory map, open for questions.
pub struct ProcessMaps {
    file: File,
    /// The kernel answered PROCMAP_QUERY (until it does not).
    query: std::sync::atomic::AtomicBool,
    /// The parsed text, read at most once, when the ioctl is missing.
    text: OnceLock<Vec<MapsLine>>,
    /// The file-backed mappings, listed at most once.
    files: OnceLock<Vec<MapsLine>>,
    /// Held while the text is read: the handle has one file position.
    reading: std::sync::Mutex<()>,
}

impl ProcessMaps {
    /// Opens /proc/PID/maps.
    pub fn open(pid: u32) -> io::Result<ProcessMaps> {
        Ok(ProcessMaps {
            file: File::open(format!("/proc/{pid}/maps"))?,
            query: std::sync::atomic::AtomicBool::new(true),
            text: OnceLock::new(),
            files: OnceLock::new(),
            reading: std::sync::Mutex::new(()),
        })
    }

    /// Every file-backed mapping, in address order, as listed the first
    /// time this is called on this [`ProcessMaps`] (open another for a
    /// fresh list).
    pub fn file_backed(&self) -> io::Result<&[MapsLine]> {
        if let Some(v) = self.files.get() {
            return Ok(v);
        }
        let v = self.list_file_backed()?;
        Ok(self.files.get_or_init(|| v))
    }

    /// Every executable mapping (binaries, `[vdso]`, JIT code), in address
    /// order: listed now (without the ioctl, from the text read once).
    pub fn executable(&self) -> io::Result<Vec<MapsLine>> {
        self.list(VMA_EXECUTABLE, MapsLine::is_exec)
    }

    fn list_file_backed(&self) -> io::Result<Vec<MapsLine>> {
        self.list(FILE_BACKED_VMA, |m| m.inode != 0)
    }

    /// The mappings the kernel's `filter` flags select, or (without the
    /// ioctl) the text's lines `keep` selects.
    fn list(&self, filter: u64, keep: fn(&MapsLine) -> bool) -> io::Result<Vec<MapsLine>> {
        if self.query.load(std::sync::atomic::Ordering::Relaxed) {
            let mut out = Vec::new();
            let mut addr = 0u64;
            loop {
                match self.ask(addr, COVERING_OR_NEXT_VMA | filter) {
                    Ok(Some(m)) => {
                        addr = m.end;
                        out.push(m);
                    }
                    Ok(None) => return Ok(out),
                    Err(Unanswered) => break,
                }
            }
        }
        Ok(self.all()?.iter().filter(|m| keep(m)).cloned().collect())
    }

    /// Whether the kernel answers one question per mapping
    /// (`PROCMAP_QUERY`, Linux 6.11): [`Self::containing`] is then one
    /// lookup, not the whole text read and parsed.
    pub fn answers_one_by_one(&self) -> bool {
        self.query.load(std::sync::atomic::Ordering::Relaxed) && self.ask(0, 0).is_ok()
    }

    /// The mapping holding `addr`, if any.
    pub fn containing(&self, addr: u64) -> io::Result<Option<MapsLine>> {
        if self.query.load(std::sync::atomic::Ordering::Relaxed)
            && let Ok(m) = self.ask(addr, 0)
        {
            return Ok(m);
        }
        let all = self.all()?;
        let i = all.partition_point(|m| m.end <= addr);
        Ok(all.get(i).filter(|m| m.start <= addr).cloned())
    }

    /// Every mapping, from the text (read once).
    pub fn all(&self) -> io::Result<&[MapsLine]> {
        if let Some(v) = self.text.get() {
            return Ok(v);
        }
        let _one_reader = self.reading.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = self.text.get() {
            return Ok(v);
        }
        // The ioctl leaves the file position alone: this reads from the
        // start.
        let mut text = String::new();
        (&self.file).read_to_string(&mut text)?;
        Ok(self.text.get_or_init(|| parse_maps(&text)))
    }

    /// One PROCMAP_QUERY. `Err` when the kernel lacks it (or it cannot
    /// answer this one, e.g. a name too long): the caller reads the text.
    fn ask(&self, addr: u64, flags: u64) -> Result<Option<MapsLine>, Unanswered> {
        let mut name = vec![0u8; NAME_MAX];
        let mut q = ProcmapQuery {
            size: std::mem::size_of::<ProcmapQuery>() as u64,
            query_flags: flags,
            query_addr: addr,
            vma_name_size: NAME_MAX as u32,
            vma_name_addr: name.as_mut_ptr() as u64,
            ..ProcmapQuery::default()
        };
        // SAFETY: `q` is a procmap_query of the size it states; the name
        // buffer it points to is live and `vma_name_size` long.
        let r = unsafe {
            libc::ioctl(
                self.file.as_raw_fd(),
                PROCMAP_QUERY,
                &mut q as *mut ProcmapQuery,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENOENT) {
                return Ok(None);
            }
            if matches!(e.raw_os_error(), Some(libc::ENOTTY | libc::EINVAL)) {
                self.query
                    .store(false, std::sync::atomic::Ordering::Relaxed);
            }
            return Err(Unanswered);
        }
        let len = (q.vma_name_size as usize).min(NAME_MAX);
        // The size counts the terminating NUL; an unnamed mapping has 0.
        let raw = &name[..len];
        let raw = raw.strip_suffix(&[0]).unwrap_or(raw);
        let text = String::from_utf8_lossy(raw);
        let (text, deleted) = match text.strip_suffix(" (deleted)") {
            Some(n) => (n.to_owned(), true),
            None => (text.into_owned(), false),
        };
        let bit = |b: u64, c: char| if q.vma_flags & b != 0 { c } else { '-' };
        let perms: String = [
            bit(VMA_READABLE, 'r'),
            bit(VMA_WRITABLE, 'w'),
            bit(VMA_EXECUTABLE, 'x'),
            if q.vma_flags & VMA_SHARED != 0 {
                's'
            } else {
                'p'
            },
        ]
        .into_iter()
        .collect();
        Ok(Some(MapsLine {
            start: q.vma_start,
            end: q.vma_end,
            perms,
            offset: q.vma_offset,
            dev: (q.dev_major, q.dev_minor),
            inode: q.inode,
            name: text,
            deleted,
        }))
    }
}

/// The kernel did not answer a PROCMAP_QUERY.
struct Unanswered;

#[cfg(test)]
mod tests {
    use super::*;

    fn text_of_self() -> Vec<MapsLine> {
        parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap())
    }

    #[test]
    fn file_backed_mappings_match_the_text() {
        let maps = ProcessMaps::open(std::process::id()).unwrap();
        let got = maps.file_backed().unwrap();
        let want: Vec<MapsLine> = text_of_self()
            .into_iter()
            .filter(|m| m.inode != 0)
            .collect();
        // Both views of this process's own (unchanging) binaries.
        let key = |m: &MapsLine| {
            (
                m.start,
                m.end,
                m.perms.clone(),
                m.offset,
                m.inode,
                m.name.clone(),
            )
        };
        let got: Vec<_> = got.iter().map(key).collect();
        let want: Vec<_> = want.iter().map(key).collect();
        assert!(!got.is_empty());
        if kernel_at_least(6, 11) {
            assert!(
                maps.query.load(std::sync::atomic::Ordering::Relaxed),
                "Linux 6.11+ answers PROCMAP_QUERY"
            );
        }
        for m in &got {
            assert!(want.contains(m), "{m:?} not in the text");
        }
    }

    fn kernel_at_least(major: u32, minor: u32) -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut parts = release
            .split(['.', '-'])
            .map(|p| p.parse::<u32>().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (major, minor)
    }

    #[test]
    fn the_mapping_holding_an_address() {
        let maps = ProcessMaps::open(std::process::id()).unwrap();
        let here = the_mapping_holding_an_address as *const () as u64;
        let m = maps.containing(here).unwrap().expect("code is mapped");
        assert!(m.start <= here && here < m.end);
        assert!(m.is_exec(), "{m:?}");
        assert!(m.file().is_some(), "{m:?}");
        let heap = Box::new(0u64);
        let h = &*heap as *const u64 as u64;
        let m = maps.containing(h).unwrap().expect("the heap is mapped");
        assert_eq!(m.inode, 0, "{m:?}");
        assert!(maps.containing(8).unwrap().is_none());
    }

    #[test]
    fn executable_mappings_match_the_text() {
        let maps = ProcessMaps::open(std::process::id()).unwrap();
        let key = |m: &MapsLine| (m.start, m.end, m.perms.clone(), m.name.clone());
        let got: Vec<_> = maps.executable().unwrap().iter().map(key).collect();
        // [vsyscall] is the kernel's gate page, not a mapping of the
        // process: the text prints it, the ioctl does not.
        let want: Vec<_> = text_of_self()
            .iter()
            .filter(|m| m.is_exec() && m.name != "[vsyscall]")
            .map(key)
            .collect();
        assert!(got.iter().any(|k| k.3 == "[vdso]"), "{got:?}");
        assert_eq!(got, want);
    }

    #[test]
    fn the_text_answers_the_same() {
        let maps = ProcessMaps::open(std::process::id()).unwrap();
        maps.query
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let here = the_text_answers_the_same as *const () as u64;
        let m = maps.containing(here).unwrap().unwrap();
        assert!(m.start <= here && here < m.end && m.is_exec());
        assert!(!maps.file_backed().unwrap().is_empty());
    }
}
