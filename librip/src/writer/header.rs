//! The header image written at creation: sizes, identity of the process,
//! clocks, executable and module table.

use crate::format::{self, BUILD_ID_MAX, Layout, hdr};

use super::modules::{ModuleTable, loaded_modules, put_u32, put_u64};

/// CLOCK_* now, in ns.
#[inline]
pub(crate) fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC now, in ns (the clock BPF timestamps use).
pub(crate) fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_MONOTONIC at tick resolution (CLOCK_MONOTONIC_COARSE), in ns: the
/// clock of the task statistics. Same timeline as [`monotonic_ns`], never
/// ahead of it and at most one tick (1–10 ms) behind, for a quarter of the
/// cost (about 6 ns against 27 ns on a VM): a poll stamps it twice.
#[inline]
pub(crate) fn task_clock_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC_COARSE)
}

/// Clock ticks per second, the unit of the process start time.
fn clock_ticks() -> u32 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as u32 }
}

/// Field 22 of /proc/self/stat: start time in clock ticks after boot.
fn process_start_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    start_ticks(&stat).unwrap_or(0)
}

/// The start time in a /proc/PID/stat line. The command name (field 2) may
/// hold spaces and parentheses, so fields are counted after its last `)`.
fn start_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The inode of one of this process's namespaces (`pid`, `mnt`), which
/// names it for readers in any other namespace; 0 if /proc cannot say.
fn namespace_inode(kind: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    // /proc/self resolves to this process whichever pid namespace the
    // /proc mount belongs to, so this is right inside a container too.
    std::fs::metadata(format!("/proc/self/ns/{kind}")).map_or(0, |m| m.ino())
}

/// The complete header image for `layout`, with the module table filled.
pub(crate) fn build(layout: &Layout, table: &mut ModuleTable) -> Vec<u8> {
    let mut h = vec![0u8; format::HEADER_SIZE as usize];
    h[hdr::MAGIC..hdr::MAGIC + 8].copy_from_slice(&format::MAGIC);
    let u32s = [
        (hdr::VERSION, format::LAYOUT_VERSION),
        (hdr::ENDIAN, format::ENDIAN_MARK),
        (hdr::WORD_SIZE, format::WORD_SIZE),
        (hdr::HEADER_SIZE, format::HEADER_SIZE),
        (hdr::ENTRY_SIZE, format::ENTRY_SIZE),
        (hdr::DEPTH, layout.depth),
        (hdr::THREAD_META_SIZE, format::THREAD_META_SIZE),
        (hdr::COROUTINE_META_SIZE, format::COROUTINE_META_SIZE),
        (hdr::THREAD_SLOT_SIZE, layout.thread_slot_size),
        (hdr::COROUTINE_SLOT_SIZE, layout.coroutine_slot_size),
        (hdr::THREAD_SLOTS, layout.thread_slots),
        (hdr::COROUTINE_SLOTS, layout.coroutine_slots),
        (hdr::PID, std::process::id()),
        (hdr::CLOCK_TICKS, clock_ticks()),
        (hdr::MODULE_TABLE, format::MODULE_TABLE_OFFSET),
        (hdr::MODULE_CAPACITY, format::MODULE_CAPACITY),
        (hdr::MODULE_ENTRY_SIZE, format::MODULE_ENTRY_SIZE),
        (hdr::STRINGS, format::STRINGS_OFFSET),
        (hdr::STRINGS_SIZE, format::STRINGS_SIZE),
    ];
    for (off, v) in u32s {
        put_u32(&mut h, off, v);
    }
    let u64s = [
        (hdr::THREAD_REGION, layout.thread_region),
        (hdr::COROUTINE_REGION, layout.coroutine_region),
        (hdr::FILE_SIZE, layout.file_size),
        (hdr::PROCESS_START_TICKS, process_start_ticks()),
        (hdr::CREATED_REALTIME_NS, clock_ns(libc::CLOCK_REALTIME)),
        (hdr::CREATED_MONOTONIC_NS, monotonic_ns()),
        (hdr::SINK_ADDR, crate::snap::sink_seq() as u64),
        (hdr::PID_NS, namespace_inode("pid")),
        (hdr::MNT_NS, namespace_inode("mnt")),
        (hdr::ALLOC_REGION, layout.alloc_region),
        (
            hdr::ALLOC_REGION_SIZE,
            if layout.alloc_region == 0 {
                0
            } else {
                format::alloc::region_size(layout.alloc_capacity)
            },
        ),
    ];
    for (off, v) in u64s {
        put_u64(&mut h, off, v);
    }

    let (mods, adds) = loaded_modules();
    let main = mods
        .iter()
        .find(|m| m.flags & format::module::MAIN_EXE != 0)
        .cloned();
    if let Some(main) = main {
        if let Some(at) = table.add_string(&mut h, &main.path) {
            put_u32(&mut h, hdr::EXE_PATH, at);
            put_u32(&mut h, hdr::EXE_PATH_LEN, main.path.len() as u32);
        }
        let id = &main.build_id[..main.build_id.len().min(BUILD_ID_MAX)];
        put_u32(&mut h, hdr::EXE_BUILD_ID_LEN, id.len() as u32);
        h[hdr::EXE_BUILD_ID..hdr::EXE_BUILD_ID + id.len()].copy_from_slice(id);
    }
    let count = table.append(&mut h, mods, adds);
    put_u32(&mut h, hdr::MODULE_COUNT, count);
    if table.truncated() {
        put_u32(&mut h, hdr::FLAGS, format::flags::MODULES_TRUNCATED);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_ticks_skip_a_command_name_with_spaces_and_parens() {
        let line = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(start_ticks(line), Some(987_654));
        assert_eq!(start_ticks("garbage"), None);
        assert!(process_start_ticks() > 0, "this process started after boot");
    }

    #[test]
    fn namespaces_are_named_by_their_inodes() {
        let link = std::fs::read_link("/proc/self/ns/pid").unwrap();
        let want = format!("pid:[{}]", namespace_inode("pid"));
        assert_eq!(link.to_str().unwrap(), want);
        assert_ne!(namespace_inode("mnt"), 0);
    }
}
