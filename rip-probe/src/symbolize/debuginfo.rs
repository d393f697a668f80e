//! Separate debug information, for binaries shipped without it (a
//! distribution's stripped daemons and libraries): looked up by the
//! binary's GNU build-id under `/usr/lib/debug/.build-id/` (where Debian's
//! `-dbgsym` and Fedora's `-debuginfo` packages put it) and, when
//! `DEBUGINFOD_URLS` is set, fetched from debuginfod servers through
//! elfutils' client library, `libdebuginfod.so.1`, loaded at run time as
//! perf and gdb do (its cache, `~/.cache/debuginfod_client`, is theirs).
//!
//! blazesym itself follows a binary's `.gnu_debuglink`; this covers the
//! binaries without one and debuginfod. The directories are the host's,
//! also for a process in a container: a build-id names one build, and the
//! host is where an operator installs debug packages (perf does the same).
//! A debug file is used only if its build-id is the binary's.

use std::{
    collections::HashMap,
    ffi::{CStr, c_char, c_int, c_long, c_void},
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use super::held::FileKey;
use object::{Object, ObjectSection, ObjectSegment};

/// Where debug packages install debug files by build-id.
pub(crate) const DEBUG_DIR: &str = "/usr/lib/debug";

/// The longest rip-probe waits for debuginfod in a run, all fetches
/// together: past it, binaries are shown without their debug information
/// (and the report says so), so an unreachable server costs a report at
/// most this.
pub(crate) const DEBUGINFOD_BUDGET: Duration = Duration::from_secs(60);

/// The largest debug file fetched from debuginfod: 1 GiB (the debug
/// information of the largest libraries, LLVM's or a JVM's, is a few
/// hundred MiB).
pub(crate) const DEBUGINFOD_MAX: u64 = 1 << 30;

/// A binary's separate debug file, and how the binary's file offsets map
/// to the virtual addresses both files share.
pub(crate) struct Split {
    /// The debug file.
    pub(crate) path: PathBuf,
    /// The binary's loadable segments.
    loads: Vec<Load>,
}

/// A loadable segment: (file offset, size in the file, virtual address).
type Load = (u64, u64, u64);

impl Split {
    /// The virtual address of the binary's file offset `off`.
    pub(crate) fn virt(&self, off: u64) -> Option<u64> {
        self.loads
            .iter()
            .find(|&&(o, n, _)| off >= o && off - o < n)
            .map(|&(o, _, v)| v.wrapping_add(off - o))
    }
}

/// The separate debug files found so far, by the binary's device, inode,
/// size and time (a binary without any is asked about once).
#[derive(Default)]
pub(crate) struct SplitDebug {
    by_file: HashMap<FileKey, Option<Arc<Split>>>,
    debuginfod: Option<Result<Debuginfod, String>>,
    /// Time spent waiting for debuginfod in this run.
    waited: Duration,
}

impl SplitDebug {
    /// The separate debug file of the binary at `path` (whose key is
    /// `key`), if it has no DWARF of its own and one is found. Problems go
    /// to `warn`.
    pub(crate) fn find(
        &mut self,
        path: &Path,
        key: FileKey,
        warn: &mut dyn FnMut(String),
    ) -> Option<Arc<Split>> {
        if let Some(s) = self.by_file.get(&key) {
            return s.clone();
        }
        let found = self.lookup(path, warn).map(Arc::new);
        self.by_file.insert(key, found.clone());
        found
    }

    /// Drops what was found for the binary `key` names.
    pub(crate) fn forget(&mut self, key: &FileKey) {
        self.by_file.remove(key);
    }

    fn lookup(&mut self, path: &Path, warn: &mut dyn FnMut(String)) -> Option<Split> {
        let (build_id, loads) = needs_split(path)?;
        let id: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
        let local = PathBuf::from(format!(
            "{DEBUG_DIR}/.build-id/{}/{}.debug",
            &id[..2],
            &id[2..]
        ));
        if same_build(&local, &build_id) {
            return Some(Split { path: local, loads });
        }
        // The client reads the variable itself; unset, it is not loaded.
        std::env::var_os("DEBUGINFOD_URLS").filter(|u| !u.is_empty())?;
        if self.waited >= DEBUGINFOD_BUDGET {
            warn(format!(
                "debuginfod: {}s spent fetching debug information; the other binaries are shown without it",
                DEBUGINFOD_BUDGET.as_secs()
            ));
            return None;
        }
        let client = match self.debuginfod.get_or_insert_with(Debuginfod::load) {
            Ok(c) => c,
            Err(e) => {
                warn(e.clone());
                return None;
            }
        };
        let t = Instant::now();
        let got = client.fetch(&build_id, DEBUGINFOD_BUDGET - self.waited);
        self.waited += t.elapsed();
        match got {
            Ok(p) if same_build(&p, &build_id) => Some(Split { path: p, loads }),
            Ok(p) => {
                warn(format!(
                    "debuginfod: {} is not the debug file of build-id {id}; it is not used",
                    p.display()
                ));
                None
            }
            // Not found: the server has no debug information for it.
            Err(None) => None,
            Err(Some(e)) => {
                warn(format!(
                    "debuginfod: {}: build-id {id}: {e}",
                    path_name(path)
                ));
                None
            }
        }
    }
}

/// A name for a binary in a message (its path, not /proc/PID/map_files).
fn path_name(path: &Path) -> String {
    std::fs::read_link(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

/// The build-id and loadable segments of the binary at `path`, if it has
/// a build-id and no DWARF of its own (`.debug_info`).
fn needs_split(path: &Path) -> Option<(Vec<u8>, Vec<Load>)> {
    let file = std::fs::File::open(path).ok()?;
    let cache = object::ReadCache::new(file);
    let obj = object::File::parse(&cache).ok()?;
    if obj
        .section_by_name(".debug_info")
        .is_some_and(|s| s.size() > 0)
    {
        return None;
    }
    let id = obj.build_id().ok()??.to_vec();
    if id.len() < 2 {
        return None;
    }
    let loads = obj
        .segments()
        .map(|s| {
            let (off, n) = s.file_range();
            (off, n, s.address())
        })
        .filter(|&(_, n, _)| n > 0)
        .collect();
    Some((id, loads))
}

/// Whether `path` is an ELF file with build-id `id`.
fn same_build(path: &Path, id: &[u8]) -> bool {
    matches!(blazesym::helper::read_elf_build_id(&path), Ok(Some(have)) if have.as_ref() == id)
}

type Begin = unsafe extern "C" fn() -> *mut c_void;
type FindDebuginfo = unsafe extern "C" fn(*mut c_void, *const u8, c_int, *mut *mut c_char) -> c_int;
type Progress = unsafe extern "C" fn(*mut c_void, c_long, c_long) -> c_int;
type SetProgress = unsafe extern "C" fn(*mut c_void, Option<Progress>);
type SetUserData = unsafe extern "C" fn(*mut c_void, *mut c_void);
type GetUserData = unsafe extern "C" fn(*mut c_void) -> *mut c_void;

/// elfutils' debuginfod client (`libdebuginfod.so.1`): it reads
/// `DEBUGINFOD_URLS`, fetches over HTTP(S) and keeps what it fetched in
/// its cache.
struct Debuginfod {
    client: *mut c_void,
    find: FindDebuginfo,
    set_user_data: SetUserData,
}

/// What the progress callback checks, for the fetch under way.
struct Limits {
    until: Instant,
}

static GET_USER_DATA: std::sync::OnceLock<GetUserData> = std::sync::OnceLock::new();

/// Stops a fetch past its time or [`DEBUGINFOD_MAX`] bytes (`a` bytes
/// received of `b`, as far as the client knows).
unsafe extern "C" fn progress(client: *mut c_void, a: c_long, b: c_long) -> c_int {
    let Some(get) = GET_USER_DATA.get() else {
        return 1;
    };
    // SAFETY: the client is the one the callback was set on; its user
    // data is the `Limits` that `fetch` set and keeps alive during the
    // call that runs this callback.
    let limits = unsafe { get(client) } as *const Limits;
    if limits.is_null() {
        return 1;
    }
    // SAFETY: see above.
    let until = unsafe { (*limits).until };
    let too_big = [a, b].iter().any(|&n| n > 0 && n as u64 > DEBUGINFOD_MAX);
    c_int::from(too_big || Instant::now() > until)
}

impl Debuginfod {
    fn load() -> Result<Debuginfod, String> {
        const LIB: &CStr = c"libdebuginfod.so.1";
        // SAFETY: dlopen of a library by its soname; its initializers are
        // elfutils' (libcurl's global init is done by debuginfod_begin).
        let lib = unsafe { libc::dlopen(LIB.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            return Err(
                "DEBUGINFOD_URLS is set, but libdebuginfod.so.1 is not installed \
                 (Debian: apt install libdebuginfod1); binaries without debug information stay so"
                    .into(),
            );
        }
        let sym = |name: &CStr| {
            // SAFETY: a symbol looked up in the library just opened.
            let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
            (!p.is_null())
                .then_some(p)
                .ok_or_else(|| format!("libdebuginfod.so.1 has no {}", name.to_string_lossy()))
        };
        let begin = sym(c"debuginfod_begin")?;
        let find = sym(c"debuginfod_find_debuginfo")?;
        let set_progress = sym(c"debuginfod_set_progressfn")?;
        let set_user = sym(c"debuginfod_set_user_data")?;
        let get_user = sym(c"debuginfod_get_user_data")?;
        // SAFETY: the symbols have these C signatures (debuginfod.h).
        let (begin, find, set_progress, set_user, get_user) = unsafe {
            (
                std::mem::transmute::<*mut c_void, Begin>(begin),
                std::mem::transmute::<*mut c_void, FindDebuginfo>(find),
                std::mem::transmute::<*mut c_void, SetProgress>(set_progress),
                std::mem::transmute::<*mut c_void, SetUserData>(set_user),
                std::mem::transmute::<*mut c_void, GetUserData>(get_user),
            )
        };
        // SAFETY: begin takes nothing; the client it returns is used from
        // this thread only (the symbolizer's) and never freed: one per
        // symbolizer, for the run.
        let client = unsafe { begin() };
        if client.is_null() {
            return Err("debuginfod: the client did not start".into());
        }
        let _ = GET_USER_DATA.set(get_user);
        // SAFETY: a valid client and a callback of the declared type.
        unsafe { set_progress(client, Some(progress)) };
        // SAFETY: no user data until a fetch sets it.
        unsafe { set_user(client, std::ptr::null_mut()) };
        Ok(Debuginfod {
            client,
            find,
            set_user_data: set_user,
        })
    }

    /// Fetches the debug file of build-id `id`, giving up after `left`.
    /// `Err(None)`: the servers have none.
    fn fetch(&self, id: &[u8], left: Duration) -> Result<PathBuf, Option<String>> {
        let limits = Limits {
            until: Instant::now() + left,
        };
        let mut path: *mut c_char = std::ptr::null_mut();
        // SAFETY: `limits` outlives the call (the callback reads it only
        // during it) and is unset after; `id` is `len` bytes; the client
        // writes a malloc'd path into `path` on success.
        let fd = unsafe {
            (self.set_user_data)(self.client, &limits as *const Limits as *mut c_void);
            let fd = (self.find)(self.client, id.as_ptr(), id.len() as c_int, &mut path);
            (self.set_user_data)(self.client, std::ptr::null_mut());
            fd
        };
        if fd < 0 {
            let errno = -fd;
            return Err((errno != libc::ENOENT).then(|| {
                if Instant::now() > limits.until {
                    "gave up: the time for debuginfod ran out".to_string()
                } else {
                    std::io::Error::from_raw_os_error(errno).to_string()
                }
            }));
        }
        // SAFETY: fd is ours to close; path is a NUL-terminated string
        // the client malloc'd, ours to free.
        let p = unsafe {
            libc::close(fd);
            if path.is_null() {
                return Err(Some("the client named no file".into()));
            }
            let p = PathBuf::from(
                std::ffi::OsStr::from_encoded_bytes_unchecked(CStr::from_ptr(path).to_bytes())
                    .to_owned(),
            );
            libc::free(path.cast());
            p
        };
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_offsets_map_to_the_segment_they_are_in() {
        let s = Split {
            path: PathBuf::new(),
            loads: vec![(0, 0x1000, 0), (0x1000, 0x2000, 0x401000)],
        };
        assert_eq!(s.virt(0x10), Some(0x10));
        assert_eq!(s.virt(0x1010), Some(0x401010));
        assert_eq!(s.virt(0x3000), None);
    }
}
