//! What rip's programs need from the kernel's BTF (register and task
//! offsets, the task iterator's attach point), derived once per kernel
//! build and cached between runs: parsing the BTF is most of what loading
//! the programs costs.
//!
//! The cache is one small file per user, under `$XDG_CACHE_HOME/rip`
//! (`/var/cache/rip` for root without it, else `~/.cache/rip`), keyed by
//! the kernel's release, build id and BTF size. It is a hostile file: it
//! is opened without following links, used only when it is a regular file
//! of the expected size owned by the user and writable by no one else, in
//! a directory likewise; its key must match exactly. On any doubt the
//! layout is derived again and the file replaced whole (written beside it,
//! then renamed), so a reader never sees half of one.

use std::{
    io::{Read, Write},
    os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
    sync::OnceLock,
};

use rip_ebpf::{PtRegsOffsets, TaskOffsets};
use zerocopy::{FromBytes, IntoBytes};

use super::btf::KernelBtf;
use crate::collect::Result;

/// What the programs need from the kernel's BTF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KernelLayout {
    /// Offsets in `struct pt_regs`.
    pub(crate) regs: PtRegsOffsets,
    /// Offsets in `struct task_struct` and around it.
    pub(crate) task: TaskOffsets,
    /// sched_switch passes `prev_state` (see
    /// [`rip_ebpf::Config::switch_state_arg`]).
    pub(crate) switch_state_arg: bool,
    /// The kernel has the BPF task iterator (`struct bpf_iter__task`).
    pub(crate) task_iter: bool,
    /// The BTF id of `bpf_iter_task`, the iterator's attach point (0:
    /// none).
    pub(crate) iter_task_id: u32,
    /// The BTF id of `btf_trace_sched_switch`, the type a BTF-typed
    /// sched_switch program attaches by (0: none).
    pub(crate) switch_tp_id: u32,
}

impl KernelLayout {
    /// The running kernel's layout: from the cache when it holds this
    /// kernel's, else derived from its BTF (and cached). Once per run.
    pub(crate) fn shared() -> Result<&'static KernelLayout> {
        static LAYOUT: OnceLock<KernelLayout> = OnceLock::new();
        if let Some(l) = LAYOUT.get() {
            return Ok(l);
        }
        let key = kernel_key();
        let file = cache_file();
        let cached = match (&key, &file) {
            (Some(k), Some(f)) => read_cache(f, k),
            _ => None,
        };
        let layout = match cached {
            Some(l) => l,
            None => {
                let l = Self::derive(KernelBtf::shared()?)?;
                if let (Some(k), Some(f)) = (&key, &file) {
                    // A cache that cannot be written costs the next run a
                    // parse, nothing more.
                    let _ = write_cache(f, k, &l);
                }
                l
            }
        };
        Ok(LAYOUT.get_or_init(|| layout))
    }

    /// Derives the layout from the kernel's BTF.
    pub(crate) fn derive(btf: &KernelBtf) -> Result<KernelLayout> {
        let task_iter = btf.has_struct("bpf_iter__task");
        Ok(KernelLayout {
            regs: btf.pt_regs()?,
            task: btf.task_struct()?,
            switch_state_arg: btf.switch_has_prev_state(),
            task_iter,
            iter_task_id: if task_iter {
                btf.func_id("bpf_iter_task")?
            } else {
                0
            },
            switch_tp_id: btf.typedef_id(SWITCH_TP).unwrap_or(0),
        })
    }

    /// The cache record: the key's length and bytes, then the layout.
    fn encode(&self, key: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(RECORD_MAX);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(self.regs.as_bytes());
        out.extend_from_slice(self.task.as_bytes());
        out.extend_from_slice(&u32::from(self.switch_state_arg).to_le_bytes());
        out.extend_from_slice(&u32::from(self.task_iter).to_le_bytes());
        out.extend_from_slice(&self.iter_task_id.to_le_bytes());
        out.extend_from_slice(&self.switch_tp_id.to_le_bytes());
        out
    }

    /// Parses a cache record made for `key` (`None`: anything else).
    fn decode(bytes: &[u8], key: &str) -> Option<KernelLayout> {
        let rest = bytes.strip_prefix(MAGIC)?;
        let (len, rest) = rest.split_first_chunk::<4>()?;
        let len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
        if len != key.len() || rest.get(..len)? != key.as_bytes() {
            return None;
        }
        let rest = &rest[len..];
        let (regs, rest) = PtRegsOffsets::read_from_prefix(rest).ok()?;
        let (task, rest) = TaskOffsets::read_from_prefix(rest).ok()?;
        let (state_arg, rest) = rest.split_first_chunk::<4>()?;
        let (iter, rest) = rest.split_first_chunk::<4>()?;
        let (id, rest) = rest.split_first_chunk::<4>()?;
        let (switch_id, rest) = rest.split_first_chunk::<4>()?;
        let flag = |b: &[u8; 4]| match u32::from_le_bytes(*b) {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        };
        let switch_state_arg = flag(state_arg)?;
        let task_iter = flag(iter)?;
        let iter_task_id = u32::from_le_bytes(*id);
        let switch_tp_id = u32::from_le_bytes(*switch_id);
        // Whole, and as derived: valid offsets, an attach point when there
        // is an iterator, two attach points at two ids.
        if !rest.is_empty()
            || regs.valid != 1
            || task.valid != 1
            || task_iter != (iter_task_id != 0)
            || (switch_tp_id != 0 && switch_tp_id == iter_task_id)
        {
            return None;
        }
        Some(KernelLayout {
            regs,
            task,
            switch_state_arg,
            task_iter,
            iter_task_id,
            switch_tp_id,
        })
    }
}

/// What aya asks of the kernel's BTF to load a task iterator or a
/// BTF-typed tracepoint: the id of its attach point (the function
/// `bpf_iter_task`, the type `btf_trace_sched_switch`). aya would parse
/// the whole of it for that lookup (a quarter of a second and tens of
/// megabytes); this is a stand-in that holds each attach point at its id
/// in the kernel's BTF (from the kernel's layout, cached between runs)
/// behind empty types. Built once per run, in milliseconds. A wrong id
/// could not go unnoticed: the kernel checks the attach point's name and
/// type.
pub(crate) fn aya_shared() -> Result<&'static aya::Btf> {
    static BUILT: OnceLock<aya::Btf> = OnceLock::new();
    if let Some(btf) = BUILT.get() {
        return Ok(btf);
    }
    let layout = KernelLayout::shared()?;
    if layout.iter_task_id == 0 {
        return Err(super::Error::Unexpected {
            path: super::btf::VMLINUX.into(),
            what: format!("no function {ITER_TASK}"),
        }
        .into());
    }
    let btf = attach_point_btf(layout.iter_task_id, layout.switch_tp_id).map_err(|e| {
        super::Error::Unexpected {
            path: super::btf::VMLINUX.into(),
            what: format!("the attach points' stand-in BTF: {e}"),
        }
    })?;
    Ok(BUILT.get_or_init(|| btf))
}

/// The task iterator's attach point in the kernel.
const ITER_TASK: &str = "bpf_iter_task";
/// The sched_switch tracepoint's type, a BTF-typed program's attach point.
pub(crate) const SWITCH_TP: &str = "btf_trace_sched_switch";

/// A BTF whose type `iter_id` is the function [`ITER_TASK`] and whose
/// type `switch_id` (0: none) is the typedef [`SWITCH_TP`], every other
/// type before them an anonymous pointer (see [`aya_shared`]). Written
/// as raw BTF and parsed: aya builds no typedef of its own.
fn attach_point_btf(iter_id: u32, switch_id: u32) -> std::result::Result<aya::Btf, String> {
    const KIND_PTR: u32 = 2;
    const KIND_TYPEDEF: u32 = 8;
    const KIND_FUNC: u32 = 12;
    // The string section: "", then the two names.
    let mut strings = vec![0u8];
    let mut name = |n: &str| {
        let at = strings.len() as u32;
        strings.extend_from_slice(n.as_bytes());
        strings.push(0);
        at
    };
    let (iter_name, switch_name) = (name(ITER_TASK), name(SWITCH_TP));
    let last = iter_id.max(switch_id);
    let mut types = Vec::with_capacity(last as usize * 12);
    for id in 1..=last {
        let (name_off, kind) = if id == iter_id {
            (iter_name, KIND_FUNC)
        } else if id == switch_id {
            (switch_name, KIND_TYPEDEF)
        } else {
            (0, KIND_PTR)
        };
        for word in [name_off, kind << 24, 0] {
            types.extend_from_slice(&word.to_le_bytes());
        }
    }
    let mut bytes = Vec::with_capacity(24 + types.len() + strings.len());
    bytes.extend_from_slice(&0xeb9f_u16.to_le_bytes());
    bytes.extend_from_slice(&[1, 0]);
    for word in [
        24,
        0,
        types.len() as u32,
        types.len() as u32,
        strings.len() as u32,
    ] {
        bytes.extend_from_slice(&word.to_le_bytes());
    }
    bytes.extend_from_slice(&types);
    bytes.extend_from_slice(&strings);
    aya::Btf::parse(&bytes, aya::Endianness::Little).map_err(|e| e.to_string())
}

/// The cache record's first bytes (and format version).
const MAGIC: &[u8; 8] = b"RIPLAY03";
/// No record is larger (the key is a release, a build id and a size).
const RECORD_MAX: usize = 1024;

/// The running kernel's release, as `uname -r` prints it.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// What identifies the running kernel's BTF: its release, build id and
/// BTF size. `None` when the build id cannot be read (no cache then).
fn kernel_key() -> Option<String> {
    let notes = std::fs::read("/sys/kernel/notes").ok()?;
    let id = gnu_build_id(&notes)?;
    let size = std::fs::metadata(super::btf::VMLINUX).ok()?.len();
    let release = kernel_release();
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!("{release} {hex} {size}"))
}

/// The GNU build id among the ELF notes `notes` (`/sys/kernel/notes`).
fn gnu_build_id(notes: &[u8]) -> Option<&[u8]> {
    const NT_GNU_BUILD_ID: u32 = 3;
    let mut rest = notes;
    let pad = |n: usize| n.checked_add(3).map(|n| n & !3);
    while rest.len() >= 12 {
        let word = |i: usize| u32::from_le_bytes(rest[i..i + 4].try_into().expect("4 bytes"));
        let (namesz, descsz, kind) = (word(0) as usize, word(4) as usize, word(8));
        let name_end = 12usize.checked_add(pad(namesz)?)?;
        let desc_end = name_end.checked_add(pad(descsz)?)?;
        if desc_end > rest.len() {
            return None;
        }
        if kind == NT_GNU_BUILD_ID && rest[12..12 + namesz] == *b"GNU\0" && descsz > 0 {
            return Some(&rest[name_end..name_end + descsz]);
        }
        rest = &rest[desc_end..];
    }
    None
}

/// Where the cache file is, if anywhere.
fn cache_file() -> Option<PathBuf> {
    let dir = match std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None if rustix::process::geteuid().is_root() => PathBuf::from("/var/cache"),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache"),
    };
    Some(dir.join("rip").join("kernel-layout"))
}

/// Whether `meta` is what this user may trust: owned by them, writable by
/// no one else.
fn trusted(meta: &std::fs::Metadata) -> bool {
    meta.uid() == rustix::process::geteuid().as_raw() && meta.mode() & 0o022 == 0
}

/// The layout cached in `file` for `key`, if it is there and trusted.
fn read_cache(file: &Path, key: &str) -> Option<KernelLayout> {
    let dir = std::fs::symlink_metadata(file.parent()?).ok()?;
    if !dir.is_dir() || !trusted(&dir) {
        return None;
    }
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(file)
        .ok()?;
    let meta = f.metadata().ok()?;
    if !meta.is_file() || !trusted(&meta) || meta.len() > RECORD_MAX as u64 {
        return None;
    }
    let mut bytes = Vec::with_capacity(RECORD_MAX);
    Read::take(&mut f, RECORD_MAX as u64 + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    KernelLayout::decode(&bytes, key)
}

/// Replaces `file` with `layout`'s record for `key`, whole.
fn write_cache(file: &Path, key: &str, layout: &KernelLayout) -> std::io::Result<()> {
    let dir = file.parent().ok_or(std::io::ErrorKind::InvalidInput)?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() || !trusted(&meta) {
        return Err(std::io::ErrorKind::PermissionDenied.into());
    }
    let tmp = dir.join(format!(".kernel-layout.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(&layout.encode(key))?;
        std::fs::rename(&tmp, file)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> KernelLayout {
        KernelLayout {
            regs: PtRegsOffsets {
                orig_ax: 120,
                args: [112, 104, 96, 56, 72, 64],
                ip: 128,
                sp: 152,
                bp: 32,
                cs: 136,
                size: 168,
                valid: 1,
                _pad: 0,
            },
            task: TaskOffsets {
                pid: 1,
                tgid: 2,
                valid: 1,
                ..TaskOffsets::default()
            },
            switch_state_arg: true,
            task_iter: true,
            iter_task_id: 64247,
            switch_tp_id: 70001,
        }
    }

    const KEY: &str = "6.18.0 48dc540c8b76393804ca8088dbfa7d42911a9444 6012345";

    #[test]
    fn a_record_reads_back_for_its_key_only() {
        let l = layout();
        let rec = l.encode(KEY);
        assert!(rec.len() <= RECORD_MAX);
        assert_eq!(KernelLayout::decode(&rec, KEY), Some(l));
        assert_eq!(KernelLayout::decode(&rec, "6.18.0 other 6012345"), None);
        assert_eq!(KernelLayout::decode(&rec, ""), None);
    }

    /// Every truncation, every extension and every single-byte change of
    /// the magic, key or flags is refused, never a panic.
    #[test]
    fn damaged_records_are_refused() {
        let rec = layout().encode(KEY);
        for n in 0..rec.len() {
            assert_eq!(KernelLayout::decode(&rec[..n], KEY), None, "cut at {n}");
        }
        let mut longer = rec.clone();
        longer.push(0);
        assert_eq!(KernelLayout::decode(&longer, KEY), None);
        let header = MAGIC.len() + 4 + KEY.len();
        // The flags: sched_switch's state argument, the task iterator.
        for i in (0..header).chain(rec.len() - 16..rec.len() - 8) {
            let mut bad = rec.clone();
            bad[i] ^= 0x5a;
            assert_eq!(KernelLayout::decode(&bad, KEY), None, "byte {i} changed");
        }
        // A key length that points past the end.
        let mut bad = rec.clone();
        bad[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(KernelLayout::decode(&bad, KEY), None);
    }

    #[test]
    fn the_build_id_is_found_among_the_notes() {
        let mut notes = Vec::new();
        // A "Xen" note first, then the GNU build id.
        notes.extend_from_slice(&4u32.to_le_bytes());
        notes.extend_from_slice(&4u32.to_le_bytes());
        notes.extend_from_slice(&6u32.to_le_bytes());
        notes.extend_from_slice(b"Xen\0\x01\x02\x03\x04");
        notes.extend_from_slice(&4u32.to_le_bytes());
        notes.extend_from_slice(&20u32.to_le_bytes());
        notes.extend_from_slice(&3u32.to_le_bytes());
        notes.extend_from_slice(b"GNU\0");
        notes.extend((1..=20u8).collect::<Vec<_>>());
        assert_eq!(
            gnu_build_id(&notes),
            Some(&(1..=20u8).collect::<Vec<_>>()[..])
        );
        // Cut short, or with sizes past the end: none, no panic.
        for n in 0..notes.len() {
            assert_eq!(gnu_build_id(&notes[..n]), None, "cut at {n}");
        }
        let mut bad = notes.clone();
        bad[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(gnu_build_id(&bad), None);
    }

    #[test]
    fn the_cache_round_trips_and_refuses_links_and_shared_files() {
        let dir = std::env::temp_dir().join(format!("rip-layout-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = dir.join("rip");
        let file = cache.join("kernel-layout");
        write_cache(&file, KEY, &layout()).unwrap();
        assert_eq!(read_cache(&file, KEY), Some(layout()));
        assert_eq!(read_cache(&file, "another kernel"), None);
        // A file others may write is not trusted.
        let mode = |p: &Path, m| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(&file, 0o666);
        assert_eq!(read_cache(&file, KEY), None);
        // Written again, whole, it is.
        write_cache(&file, KEY, &layout()).unwrap();
        assert_eq!(read_cache(&file, KEY), Some(layout()));
        // A link in its place is not followed.
        let real = dir.join("elsewhere");
        std::fs::rename(&file, &real).unwrap();
        std::os::unix::fs::symlink(&real, &file).unwrap();
        assert_eq!(read_cache(&file, KEY), None);
        // Nor is a directory others may write in.
        std::fs::remove_file(&file).unwrap();
        write_cache(&file, KEY, &layout()).unwrap();
        mode(&cache, 0o777);
        assert_eq!(read_cache(&file, KEY), None);
        assert!(write_cache(&file, KEY, &layout()).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
