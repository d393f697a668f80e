//! The module table: every executable mapping of the process, with its
//! path and build-id, so that addresses can be symbolized after the process
//! is gone (PIE executables and shared libraries load at random addresses).
//!
//! Captured with `dl_iterate_phdr` at creation and refreshed at slot
//! registration when the loader's `dlpi_adds` counter moved. Entries are
//! only appended, each written before the count that publishes it.

use std::{
    collections::HashSet,
    ffi::{CStr, c_int, c_void},
    os::unix::ffi::OsStrExt,
};

use crate::format::{self, BUILD_ID_MAX, MODULE_CAPACITY, MODULE_ENTRY_SIZE, module};

/// One executable segment of a loaded object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ModuleInfo {
    pub(crate) path: Vec<u8>,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) file_offset: u64,
    pub(crate) load_bias: u64,
    pub(crate) build_id: Vec<u8>,
    pub(crate) flags: u32,
}

/// Writes bytes at a file offset: the private header image at creation, the
/// mapping afterwards.
pub(crate) trait Put {
    /// Stores `bytes` at the 8-aligned `off`.
    fn put(&mut self, off: u64, bytes: &[u8]);
}

impl Put for Vec<u8> {
    fn put(&mut self, off: u64, bytes: &[u8]) {
        let off = off as usize;
        self[off..off + bytes.len()].copy_from_slice(bytes);
    }
}

impl Put for crate::shm::Shm {
    fn put(&mut self, off: u64, bytes: &[u8]) {
        self.store_bytes(off, bytes);
    }
}

/// The writer's private record of what the table holds.
#[derive(Default)]
pub(crate) struct ModuleTable {
    count: u32,
    strings_used: u32,
    seen: HashSet<(u64, u64)>,
    adds: u64,
    truncated: bool,
}

impl ModuleTable {
    /// Whether some module did not fit.
    pub(crate) fn truncated(&self) -> bool {
        self.truncated
    }

    /// Whether objects were loaded since the last capture.
    pub(crate) fn stale(&self) -> bool {
        loader_adds() != self.adds
    }

    /// Appends the modules not yet in the table; returns the new count,
    /// which the caller publishes after these writes.
    pub(crate) fn append(&mut self, out: &mut impl Put, mods: Vec<ModuleInfo>, adds: u64) -> u32 {
        self.adds = adds;
        for m in mods {
            if !self.seen.insert((m.start, m.load_bias)) {
                continue;
            }
            if self.count >= MODULE_CAPACITY {
                self.truncated = true;
                break;
            }
            let Some(path) = self.add_string(out, &m.path) else {
                self.truncated = true;
                break;
            };
            let mut e = [0u8; MODULE_ENTRY_SIZE as usize];
            put_u64(&mut e, module::START, m.start);
            put_u64(&mut e, module::END, m.end);
            put_u64(&mut e, module::FILE_OFFSET, m.file_offset);
            put_u64(&mut e, module::LOAD_BIAS, m.load_bias);
            put_u32(&mut e, module::PATH, path);
            put_u32(&mut e, module::PATH_LEN, m.path.len() as u32);
            let id = &m.build_id[..m.build_id.len().min(BUILD_ID_MAX)];
            put_u32(&mut e, module::BUILD_ID_LEN, id.len() as u32);
            put_u32(&mut e, module::FLAGS, m.flags);
            e[module::BUILD_ID..module::BUILD_ID + id.len()].copy_from_slice(id);
            let off = format::MODULE_TABLE_OFFSET + self.count * MODULE_ENTRY_SIZE;
            out.put(u64::from(off), &e);
            self.count += 1;
        }
        self.count
    }

    /// Stores a string in the string area; its file offset, or `None` when full.
    pub(crate) fn add_string(&mut self, out: &mut impl Put, s: &[u8]) -> Option<u32> {
        let len = u32::try_from(s.len()).ok()?.next_multiple_of(8);
        if self.strings_used.checked_add(len)? > format::STRINGS_SIZE {
            return None;
        }
        let off = format::STRINGS_OFFSET + self.strings_used;
        out.put(u64::from(off), s);
        self.strings_used += len;
        Some(off)
    }
}

pub(crate) fn put_u64(buf: &mut [u8], off: usize, v: u64) {
    buf[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u32(buf: &mut [u8], off: usize, v: u32) {
    buf[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// The loader's count of objects ever loaded.
pub(crate) fn loader_adds() -> u64 {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: the loader passes a valid info; `data` is the u64 below.
        unsafe { *data.cast::<u64>() = (*info).dlpi_adds };
        1
    }
    let mut adds = 0u64;
    // SAFETY: the callback matches the loader's signature and only writes
    // through `data`, which points at `adds` for the duration of the call.
    unsafe { libc::dl_iterate_phdr(Some(first), (&raw mut adds).cast()) };
    adds
}

/// Every executable segment of every loaded object, and the loader's
/// `dlpi_adds` at the time.
pub(crate) fn loaded_modules() -> (Vec<ModuleInfo>, u64) {
    struct Acc {
        mods: Vec<ModuleInfo>,
        adds: u64,
        exe: Vec<u8>,
        first: bool,
    }
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid info for this call; `data` is
        // the Acc below, used by nothing else meanwhile.
        let (info, acc) = unsafe { (&*info, &mut *data.cast::<Acc>()) };
        acc.adds = info.dlpi_adds;
        // SAFETY: the loader's info describes a loaded object.
        let mods = unsafe { object_modules(info, acc.first, &acc.exe) };
        acc.mods.extend(mods);
        acc.first = false;
        0
    }
    let exe = std::fs::read_link("/proc/self/exe")
        .map(|p| p.as_os_str().as_bytes().to_vec())
        .unwrap_or_default();
    let mut acc = Acc {
        mods: Vec::new(),
        adds: 0,
        exe,
        first: true,
    };
    // SAFETY: as in `loader_adds`; `data` points at `acc` during the call.
    unsafe { libc::dl_iterate_phdr(Some(each), (&raw mut acc).cast()) };
    (acc.mods, acc.adds)
}

/// # Safety
/// `info` describes an object the loader has loaded (its program headers
/// and PT_NOTE segments are mapped and readable).
unsafe fn object_modules(info: &libc::dl_phdr_info, main: bool, exe: &[u8]) -> Vec<ModuleInfo> {
    let name = if info.dlpi_name.is_null() {
        &[][..]
    } else {
        // SAFETY: the loader's names are NUL-terminated.
        unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes()
    };
    let (path, flags) = if main && name.is_empty() {
        (exe.to_vec(), module::MAIN_EXE)
    } else if name.first() == Some(&b'/') {
        (name.to_vec(), 0)
    } else {
        (name.to_vec(), module::VDSO)
    };
    let phdrs = if info.dlpi_phdr.is_null() {
        &[][..]
    } else {
        // SAFETY: the loader gives dlpi_phnum headers at dlpi_phdr.
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
    };
    let bias = info.dlpi_addr;
    let build_id = phdrs
        .iter()
        .filter(|p| p.p_type == libc::PT_NOTE)
        // SAFETY: a PT_NOTE segment of a loaded object lies in its mapped,
        // readable image.
        .find_map(|p| unsafe { build_id_note(bias.wrapping_add(p.p_vaddr), p.p_memsz) })
        .unwrap_or_default();
    phdrs
        .iter()
        .filter(|p| p.p_type == libc::PT_LOAD && p.p_flags & libc::PF_X != 0)
        .map(|p| ModuleInfo {
            path: path.clone(),
            start: bias.wrapping_add(p.p_vaddr),
            end: bias.wrapping_add(p.p_vaddr).wrapping_add(p.p_memsz),
            file_offset: p.p_offset,
            load_bias: bias,
            build_id: build_id.clone(),
            flags,
        })
        .collect()
}

/// The NT_GNU_BUILD_ID note's descriptor among the notes at `addr`.
///
/// # Safety
/// `len` bytes at `addr` are mapped and readable.
unsafe fn build_id_note(addr: u64, len: u64) -> Option<Vec<u8>> {
    const NT_GNU_BUILD_ID: u32 = 3;
    // SAFETY: contract of this function.
    let notes = unsafe { std::slice::from_raw_parts(addr as *const u8, len as usize) };
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(notes.get(at..at + 4)?.try_into().ok()?))
    };
    let mut at = 0usize;
    while at + 12 <= notes.len() {
        let (namesz, descsz, kind) = (word(at)? as usize, word(at + 4)? as usize, word(at + 8)?);
        let name_at = at + 12;
        let desc_at = name_at.checked_add(namesz.next_multiple_of(4))?;
        let next = desc_at.checked_add(descsz.next_multiple_of(4))?;
        if kind == NT_GNU_BUILD_ID && notes.get(name_at..name_at + namesz) == Some(b"GNU\0") {
            return notes.get(desc_at..desc_at + descsz).map(<[u8]>::to_vec);
        }
        at = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_test_binary_and_libc_with_build_ids() {
        let (mods, adds) = loaded_modules();
        assert!(adds > 0);
        let main = mods
            .iter()
            .find(|m| m.flags & module::MAIN_EXE != 0)
            .expect("main exe");
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(main.path, exe.as_os_str().as_bytes());
        assert!(main.start < main.end);
        // This very function's code lies in one of the main executable's segments.
        let here = finds_the_test_binary_and_libc_with_build_ids as *const () as u64;
        assert!(
            mods.iter()
                .any(|m| m.flags & module::MAIN_EXE != 0 && (m.start..m.end).contains(&here))
        );
        let libc = mods
            .iter()
            .find(|m| m.path.windows(7).any(|w| w == b"libc.so"));
        let libc = libc.expect("libc is loaded");
        assert!(
            !libc.build_id.is_empty(),
            "Debian's libc carries a GNU build-id"
        );
    }

    #[test]
    fn appends_each_segment_once_and_stops_when_full() {
        let mut image = vec![0u8; format::HEADER_SIZE as usize];
        let mut t = ModuleTable::default();
        let (mods, adds) = loaded_modules();
        let n = t.append(&mut image, mods.clone(), adds);
        assert_eq!(n as usize, mods.len());
        assert_eq!(t.append(&mut image, mods, adds), n, "nothing new");
        let many = (0..2 * MODULE_CAPACITY as u64).map(|i| ModuleInfo {
            path: b"/x".to_vec(),
            start: 1 << 40 | i << 12,
            end: (1 << 40 | i << 12) + 1,
            file_offset: 0,
            load_bias: 0,
            build_id: vec![],
            flags: 0,
        });
        assert_eq!(t.append(&mut image, many.collect(), adds), MODULE_CAPACITY);
        assert!(t.truncated());
    }
}
