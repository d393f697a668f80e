//! What `rip-probe locks` reads from the target beside the kernel's
//! counts, while it still runs: what each counted futex word is part of
//! (a lock's layout, read from memory), the waiting threads' names, and
//! each waker's stack with the frames libc's wrappers hide filled in.
//! `analyze::contention` works from this evidence without reading the
//! process; after the process exited, every read fails and the evidence
//! is empty (locks keep their counts and lose their names).

use std::collections::{BTreeSet, HashMap};

use librip::reader::MapsLine;
use rip_ebpf::contention::{WAKER_STACK_WORDS, WakerStat};

use super::{
    kernel::contention::Counted,
    locks,
    memory::{Memory, ProcessMemory},
};
use crate::{
    discover::maps::ProcessMaps,
    model::{LockKind, MutexFlavor},
};

/// A counted futex word's lock: its address, its kind and a glibc
/// mutex's flavour.
pub type LockAt = (u64, LockKind, Option<MutexFlavor>);

/// The evidence for one `rip-probe locks` report.
#[derive(Clone, Debug, Default)]
pub struct ContentionEvidence {
    /// Per counted futex word, the lock it is part of (absent: no known
    /// layout fits, or the memory could not be read).
    pub locks: HashMap<u64, LockAt>,
    /// Each waiting thread's name (`None`: gone before it was read).
    pub names: HashMap<u32, Option<String>>,
    /// Each waking stack, by (futex word, the kernel's stack id).
    pub wakers: HashMap<(u64, i64), WakerStack>,
}

/// A waker's user stack as read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WakerStack {
    /// Innermost first: the kernel's frame-pointer walk, with the return
    /// addresses libc's wrappers skip put back.
    pub addrs: Vec<u64>,
    /// The index in `addrs` of the first address outside libc and the
    /// loader, by the process's map: where the lock was released.
    pub released_at: Option<usize>,
}

/// Reads the evidence for what the futex programs `counted` in process
/// `pid`.
pub fn evidence(pid: u32, counted: &Counted) -> ContentionEvidence {
    let mem = ProcessMemory::new(pid);
    let status = |tid| locks::tid_status(pid, tid);
    let lock_reads = counted.locks.iter().filter_map(|(uaddr, stat)| {
        Some((
            *uaddr,
            locks::lock_at(&mem, &status, *uaddr, stat.op, stat.val)?,
        ))
    });
    let locks = lock_reads.collect();
    let tids: BTreeSet<u32> = counted.waiters.iter().map(|(k, _)| k.tid).collect();
    let names = tids
        .into_iter()
        .map(|tid| {
            let name = crate::discover::read_proc(pid, tid, "comm")
                .ok()
                .map(|c| c.trim_end_matches('\n').to_string());
            (tid, name)
        })
        .collect();
    // Code is file-backed: those mappings are all the stacks need (the
    // whole map has two lines per thread).
    let maps: Vec<MapsLine> = ProcessMaps::open(pid)
        .ok()
        .and_then(|m| m.file_backed().ok().map(<[_]>::to_vec))
        .unwrap_or_default();
    let wakers = counted
        .wakers
        .iter()
        .map(|(k, w)| {
            let fp = counted
                .stacks
                .get(&k.stack_id)
                .map_or(&[][..], Vec::as_slice);
            let addrs = waker_stack(fp, w, &maps, &mem);
            let released_at = addrs
                .iter()
                .position(|&a| code_at(&maps, a).is_some_and(|m| !is_libc(&m.name)));
            let stack = WakerStack { addrs, released_at };
            ((k.uaddr, k.stack_id), stack)
        })
        .collect();
    ContentionEvidence {
        locks,
        names,
        wakers,
    }
}

/// Whether `path` is the C library or the dynamic loader, whose futex
/// wrappers are not where a lock is released.
fn is_libc(path: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or(path);
    [
        "libc.so",
        "libc-",
        "libpthread",
        "ld-linux",
        "ld-musl",
        "libc.musl",
    ]
    .iter()
    .any(|p| file.starts_with(p))
}

/// The executable mapping holding `addr`.
fn code_at(maps: &[MapsLine], addr: u64) -> Option<&MapsLine> {
    maps.iter()
        .find(|m| (m.start..m.end).contains(&addr) && m.is_exec())
}

/// Whether the instruction before `ra` is a call: `call rel32` (e8),
/// `call *disp32(%rip)` (ff 15), or `call *%reg` (ff d0+r, 41 ff d0+r).
fn after_call(mem: &dyn Memory, ra: u64) -> bool {
    let mut b = [0u8; 6];
    let Some(at) = ra.checked_sub(6) else {
        return false;
    };
    if mem.read(at, &mut b).is_err() {
        return false;
    }
    b[1] == 0xe8 || (b[0] == 0xff && b[1] == 0x15) || (b[4] == 0xff && b[5] & 0xf8 == 0xd0)
}

/// The waker's stack: the frame-pointer walk the kernel took, with the
/// gap it leaves filled in. libc's futex wrappers keep no frame pointer,
/// so the walk goes from the wrapper straight to the caller of the
/// function that released the lock. The words kept from the top of the
/// stack hold the return addresses in between: those that point just
/// after a call, up to the first outside libc (the releasing function).
fn waker_stack(fp: &[u64], w: &WakerStat, maps: &[MapsLine], mem: &dyn Memory) -> Vec<u64> {
    let Some((&ip, rest)) = fp.split_first() else {
        return Vec::new();
    };
    let mut out = vec![ip];
    if code_at(maps, ip).is_some_and(|m| is_libc(&m.name)) {
        for &word in w.top.iter().take(WAKER_STACK_WORDS) {
            let Some(m) = code_at(maps, word) else {
                continue;
            };
            if !after_call(mem, word) {
                continue;
            }
            if rest.first() == Some(&word) {
                break;
            }
            out.push(word);
            if !is_libc(&m.name) {
                break;
            }
        }
    }
    out.extend_from_slice(rest);
    out
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    #[test]
    fn libc_is_recognised_by_file_name() {
        for p in [
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
            "/lib/libpthread.so.0",
        ] {
            assert!(is_libc(p), "{p}");
        }
        for p in ["/srv/server", "/usr/lib/libcurl.so.4", "/opt/libcore.so"] {
            assert!(!is_libc(p), "{p}");
        }
    }

    /// Code bytes by address; every other read fails.
    struct Code(HashMap<u64, u8>);

    impl Memory for Code {
        fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = *self
                    .0
                    .get(&(addr + i as u64))
                    .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
            }
            Ok(())
        }
    }

    fn map(start: u64, end: u64, name: &str) -> MapsLine {
        MapsLine {
            start,
            end,
            perms: "r-xp".into(),
            offset: 0,
            dev: (8, 1),
            inode: 1,
            name: name.into(),
            deleted: false,
        }
    }

    /// A wake from libc's wrapper: the kernel's walk skips from the
    /// wrapper to the caller of the releasing function; the stack's top
    /// words give back the libc frame and the releasing function, each a
    /// return address just after a call; words that are data, or that
    /// follow no call, are not frames.
    #[test]
    fn a_waker_stack_gets_back_the_frames_libc_hides() {
        const LIBC: u64 = 0x7000_0000;
        const APP: u64 = 0x40_0000;
        let maps = [
            map(APP, APP + 0x1000, "/srv/server"),
            map(LIBC, LIBC + 0x1000, "/usr/lib/x86_64-linux-gnu/libc.so.6"),
        ];
        let wrapper = LIBC + 0x10;
        let in_unlock = LIBC + 0x100; // after `call rel32`
        let not_a_return = LIBC + 0x200; // after no call
        let in_release = APP + 0x300; // after `call *%rax`
        let caller = APP + 0x500;
        let mut code = HashMap::new();
        for (ra, bytes) in [
            (in_unlock, [0, 0xe8, 0, 0, 0, 0]),
            (not_a_return, [0x90; 6]),
            (in_release, [0, 0, 0, 0, 0xff, 0xd0]),
        ] {
            for (i, b) in bytes.into_iter().enumerate() {
                code.insert(ra - 6 + i as u64, b);
            }
        }
        let mut w = WakerStat::default();
        w.top[..5].copy_from_slice(&[0x1234, not_a_return, in_unlock, in_release, caller]);
        let stack = waker_stack(&[wrapper, caller], &w, &maps, &Code(code));
        assert_eq!(stack, [wrapper, in_unlock, in_release, caller]);
        // Outside libc, the kernel's walk is whole.
        let plain = waker_stack(&[in_release, caller], &w, &maps, &Code(HashMap::new()));
        assert_eq!(plain, [in_release, caller]);
        assert!(waker_stack(&[], &w, &maps, &Code(HashMap::new())).is_empty());
    }
}
