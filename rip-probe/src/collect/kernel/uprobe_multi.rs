//! Uprobes in bulk: one `uprobe_multi` link (Linux 6.6) attaches a program
//! to any number of functions of one binary, and one close detaches them.
//!
//! Attached one by one (a perf event each, as aya does), every uprobe
//! costs the kernel a grace period when it goes: 923 functions took 105 s
//! to detach, the process stuck in D state. aya can neither load a program
//! for `BPF_TRACE_UPROBE_MULTI` nor create such a link, so both are done
//! here: the program is loaded a second time from the same object, its
//! map references pointed at the maps aya created (the two copies share
//! every map), and linked with one `BPF_LINK_CREATE`.
//!
//! A kernel without them refuses the link (or the load); callers then
//! attach one perf event per function as before (see [`Bulk`]).

use std::{
    collections::HashSet,
    ffi::CString,
    io,
    os::{
        fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd},
        unix::ffi::OsStrExt,
    },
    path::Path,
    sync::OnceLock,
};

use aya::{Ebpf, maps::Map};
use aya_obj::generated::{
    BPF_F_UPROBE_MULTI_RETURN, bpf_attach_type, bpf_attr, bpf_cmd, bpf_prog_type,
};

/// A program linked to many functions; dropping it detaches them all.
#[derive(Debug)]
pub(crate) struct MultiLink {
    /// The link: closing it detaches every function at once.
    _link: OwnedFd,
    /// The program loaded for it (the link holds it too).
    _prog: OwnedFd,
}

/// Why this kernel attaches one uprobe per function, once known.
static REFUSED: OnceLock<String> = OnceLock::new();

/// Whether `RIP_PROBE_UPROBE_MULTI=0` asks for one uprobe per function
/// (to compare the two ways, or to work around a kernel's bug).
fn disabled() -> bool {
    std::env::var("RIP_PROBE_UPROBE_MULTI").is_ok_and(|v| v == "0")
}

/// Why uprobes are attached one by one here, if they are: the kernel
/// refused a `uprobe_multi` link earlier in this run, or it was turned
/// off. `None` until a link was tried, or when they work.
pub(crate) fn refused() -> Option<String> {
    if disabled() {
        return Some("RIP_PROBE_UPROBE_MULTI=0 turns uprobe_multi links off".into());
    }
    REFUSED.get().cloned()
}

/// What [`attach`] did.
#[derive(Debug)]
pub(crate) enum Bulk {
    /// One link holds every offset.
    Linked(MultiLink),
    /// This kernel has no `uprobe_multi` links (the reason is in
    /// [`refused`]): attach one uprobe per function.
    Unsupported,
}

/// Attaches program `name` of `ebpf` (a uprobe, or a uretprobe if
/// `ret`) to every `offsets` (file offsets) of `binary`, firing only in
/// process `pid`, with one link.
///
/// Errors that a per-function attach would meet too (the file is gone,
/// the process exited, no permission) are errors; a kernel that does not
/// know the link or the attach type gives [`Bulk::Unsupported`].
pub(crate) fn attach(
    ebpf: &Ebpf,
    name: &str,
    ret: bool,
    pid: u32,
    binary: &Path,
    offsets: &[u64],
) -> io::Result<Bulk> {
    if disabled() || REFUSED.get().is_some() {
        return Ok(Bulk::Unsupported);
    }
    let prog = match load(ebpf, name) {
        Ok(fd) => fd,
        Err(e) if unsupported(&e) => return Ok(refuse(format!("loading {name} for it: {e}"))),
        Err(e) => return Err(e),
    };
    let path = CString::new(binary.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    let mut attr = zeroed_attr();
    // SAFETY: `link_create` is the member BPF_LINK_CREATE reads; writing
    // plain integers into a zeroed union is sound.
    let link = unsafe { &mut attr.link_create };
    link.__bindgen_anon_1.prog_fd = prog.as_raw_fd() as u32;
    link.attach_type = bpf_attach_type::BPF_TRACE_UPROBE_MULTI as u32;
    // SAFETY: as above, the `uprobe_multi` member of its inner union.
    let multi = unsafe { &mut link.__bindgen_anon_3.uprobe_multi };
    multi.path = path.as_ptr() as u64;
    multi.offsets = offsets.as_ptr() as u64;
    multi.cnt = u32::try_from(offsets.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many offsets"))?;
    multi.flags = if ret { BPF_F_UPROBE_MULTI_RETURN } else { 0 };
    multi.pid = pid;
    match sys_bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr) {
        Ok(fd) => Ok(Bulk::Linked(MultiLink {
            _link: fd,
            _prog: prog,
        })),
        Err(e) if unsupported(&e) => Ok(refuse(format!("creating the link: {e}"))),
        Err(e) => Err(e),
    }
}

/// Remembers (and says, with `RIP_PROBE_TIMING=1`) why this kernel gets
/// one uprobe per function.
fn refuse(why: String) -> Bulk {
    let why = format!("the kernel refused a uprobe_multi link (Linux 6.6 has them): {why}");
    if crate::util::timing::enabled() {
        eprintln!("rip-probe timing: one uprobe per function: {why}");
    }
    let _ = REFUSED.set(why);
    Bulk::Unsupported
}

/// Whether `e` says the kernel does not know the link, the attach type or
/// part of the attributes (a kernel before 6.6 gives EINVAL or E2BIG).
fn unsupported(e: &io::Error) -> bool {
    // ENOTSUPP, the kernel's own (not EOPNOTSUPP), reaches user space too.
    const ENOTSUPP: i32 = 524;
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::E2BIG | libc::EOPNOTSUPP | ENOTSUPP)
    )
}

/// Loads program `name` of rip-ebpf's object for `BPF_TRACE_UPROBE_MULTI`,
/// its map references resolved to `ebpf`'s maps.
fn load(ebpf: &Ebpf, name: &str) -> io::Result<OwnedFd> {
    let bad = |what: String| io::Error::other(format!("{name}: {what}"));
    let mut obj =
        aya_obj::Object::parse(super::EBPF_OBJECT).map_err(|e| bad(format!("parsing: {e}")))?;
    let program = obj
        .programs
        .get(name)
        .cloned()
        .ok_or_else(|| bad("not in the object".into()))?;
    let key = program.function_key();
    // aya's rule: calls and map references may point into any section
    // holding functions.
    let text_sections: HashSet<usize> = obj.functions.keys().map(|(s, _)| *s).collect();
    // Only this program and the functions it may call: another program
    // may use a map already taken out of `ebpf`.
    let programs: HashSet<usize> = obj
        .programs
        .values()
        .map(|p| p.section_index)
        .filter(|&s| s != key.0)
        .collect();
    obj.functions.retain(|k, _| !programs.contains(&k.0));
    obj.programs.retain(|n, _| n == name);
    let maps = std::mem::take(&mut obj.maps);
    let fds: Vec<(&str, RawFd, &aya_obj::Map)> = maps
        .iter()
        .filter_map(|(n, m)| Some((n.as_str(), map_fd(ebpf.map(n)?).as_raw_fd(), m)))
        .collect();
    obj.relocate_maps(fds.into_iter(), &text_sections)
        .map_err(|e| bad(format!("resolving its maps: {e}")))?;
    obj.relocate_calls(&text_sections)
        .map_err(|e| bad(format!("resolving its calls: {e}")))?;
    let insns = &obj
        .functions
        .get(&key)
        .ok_or_else(|| bad("its code is not in the object".into()))?
        .instructions;

    let mut attr = zeroed_attr();
    // SAFETY: `__bindgen_anon_3` is the member BPF_PROG_LOAD reads.
    let load = unsafe { &mut attr.__bindgen_anon_3 };
    load.prog_type = bpf_prog_type::BPF_PROG_TYPE_KPROBE as u32;
    load.expected_attach_type = bpf_attach_type::BPF_TRACE_UPROBE_MULTI as u32;
    load.insns = insns.as_ptr() as u64;
    load.insn_cnt = insns.len() as u32;
    load.license = program.license.as_ptr() as u64;
    // The kernel names programs by at most 15 bytes (and a NUL).
    for (d, s) in load.prog_name.iter_mut().zip(name.bytes().take(15)) {
        *d = s as libc::c_char;
    }
    match sys_bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr) {
        Ok(fd) => Ok(fd),
        // The verifier's reason, if it has one (a load the normal way of
        // the same code passed it, so this is a kernel that lacks the
        // attach type, or a bug).
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            let mut log = vec![0u8; 1 << 16];
            // SAFETY: as above.
            let load = unsafe { &mut attr.__bindgen_anon_3 };
            load.log_level = 1;
            load.log_buf = log.as_mut_ptr() as u64;
            load.log_size = log.len() as u32;
            let _ = sys_bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr);
            let text = String::from_utf8_lossy(&log);
            let last = text
                .trim_end_matches('\0')
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .to_string();
            Err(io::Error::new(e.kind(), format!("{e} (verifier: {last})")))
        }
        Err(e) => Err(e),
    }
}

/// The descriptor of map `map`, whatever its type.
fn map_fd(map: &Map) -> BorrowedFd<'_> {
    let data = match map {
        Map::Array(d)
        | Map::ArrayOfMaps(d)
        | Map::BloomFilter(d)
        | Map::CgroupArray(d)
        | Map::CgroupStorage(d)
        | Map::CgrpStorage(d)
        | Map::CpuMap(d)
        | Map::DevMap(d)
        | Map::DevMapHash(d)
        | Map::HashMap(d)
        | Map::HashOfMaps(d)
        | Map::InodeStorage(d)
        | Map::LpmTrie(d)
        | Map::LruHashMap(d)
        | Map::PerCpuArray(d)
        | Map::PerCpuCgroupStorage(d)
        | Map::PerCpuHashMap(d)
        | Map::PerCpuLruHashMap(d)
        | Map::PerfEventArray(d)
        | Map::ProgramArray(d)
        | Map::Queue(d)
        | Map::ReusePortSockArray(d)
        | Map::RingBuf(d)
        | Map::SockHash(d)
        | Map::SockMap(d)
        | Map::SkStorage(d)
        | Map::Stack(d)
        | Map::StackTraceMap(d)
        | Map::Unsupported(d)
        | Map::XskMap(d) => d,
    };
    data.fd().as_fd()
}

fn zeroed_attr() -> bpf_attr {
    // SAFETY: bpf_attr is a C union of plain integers: all zeroes is the
    // value the kernel expects in every member not set.
    unsafe { std::mem::zeroed() }
}

/// A bpf(2) command that returns a new descriptor.
fn sys_bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<OwnedFd> {
    let fd = super::batch::sys_bpf(cmd, attr)?;
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

#[cfg(test)]
mod tests {
    use std::mem::offset_of;

    use aya_obj::generated::{
        bpf_attr__bindgen_ty_4 as ProgLoad, bpf_attr__bindgen_ty_14 as LinkCreate,
        bpf_attr__bindgen_ty_14__bindgen_ty_3__bindgen_ty_7 as UprobeMulti,
    };

    use super::*;

    /// The attributes as include/uapi/linux/bpf.h lays them out: the
    /// kernel reads them at these offsets.
    #[test]
    fn attributes_have_the_kernels_layout() {
        assert_eq!(bpf_attach_type::BPF_TRACE_UPROBE_MULTI as u32, 48);
        assert_eq!(bpf_cmd::BPF_LINK_CREATE as u32, 28);
        assert_eq!(BPF_F_UPROBE_MULTI_RETURN, 1);
        assert_eq!(offset_of!(ProgLoad, expected_attach_type), 68);
        assert_eq!(offset_of!(ProgLoad, prog_name), 48);
        assert_eq!(offset_of!(LinkCreate, attach_type), 8);
        // The union of per-type members starts at byte 16 of link_create.
        assert_eq!(offset_of!(LinkCreate, __bindgen_anon_3), 16);
        assert_eq!(offset_of!(UprobeMulti, path), 0);
        assert_eq!(offset_of!(UprobeMulti, offsets), 8);
        assert_eq!(offset_of!(UprobeMulti, cookies), 24);
        assert_eq!(offset_of!(UprobeMulti, cnt), 32);
        assert_eq!(offset_of!(UprobeMulti, flags), 36);
        assert_eq!(offset_of!(UprobeMulti, pid), 40);
    }

    #[test]
    fn old_kernels_refusals_are_unsupported_not_errors() {
        for errno in [libc::EINVAL, libc::E2BIG, libc::EOPNOTSUPP, 524] {
            assert!(unsupported(&io::Error::from_raw_os_error(errno)));
        }
        for errno in [libc::ENOENT, libc::ESRCH, libc::EPERM] {
            assert!(!unsupported(&io::Error::from_raw_os_error(errno)));
        }
    }
}
