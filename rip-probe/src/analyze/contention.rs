//! `rip-probe locks`: what the futex programs counted, turned into one
//! [`LocksReport`]: per lock its totals, percentile and histogram, the
//! threads that waited longest, and where the wakers were; each lock
//! recognised and named from the target's memory.

use std::collections::HashMap;

use librip::reader::{MapsLine, ProcessMaps};
use rip_ebpf::contention::{LockStat, WAKER_STACK_WORDS, WakerStat};

use crate::{
    analyze::hist::Log2Hist,
    collect::{
        kernel::contention::{Counted, MAX_LOCKS},
        locks,
        memory::{Memory, ProcessMemory},
    },
    discover,
    model::{
        Bucket, Frame, LockKind, ProcessInfo,
        contention::{LockContention, LockWaiter, LockWaker, LocksReport},
    },
    symbolize::{data::DataNames, stacks::StackSymbolizer},
};

/// Waiters listed per lock.
const TOP_WAITERS: usize = 5;
/// Waking stacks listed per lock.
const TOP_WAKERS: usize = 5;

/// Builds the report of process `process.pid` from what was `counted`
/// over `window_ns`. Reads the target's memory and /proc for names and
/// kinds while it still runs (after it exited, locks keep their counts and
/// lose their names).
pub fn report(counted: &Counted, process: ProcessInfo, window_ns: u64) -> LocksReport {
    let pid = process.pid;
    let mem = ProcessMemory::new(pid);
    let status = |tid| locks::tid_status(pid, tid);
    // Code is file-backed: those mappings are all the stacks need (the
    // whole map has two lines per thread).
    let process_maps = ProcessMaps::open(pid).ok();
    let mut names = DataNames::new(pid, process_maps.as_ref());
    let maps: Vec<MapsLine> = process_maps
        .as_ref()
        .and_then(|m| m.file_backed().ok())
        .map(<[_]>::to_vec)
        .unwrap_or_default();
    let mut symbolizer = StackSymbolizer::new(pid);
    let mut comms: HashMap<u32, Option<String>> = HashMap::new();

    let mut out: Vec<LockContention> = counted
        .locks
        .iter()
        .map(|(uaddr, stat)| {
            let (lock, kind, mutex) = locks::lock_at(&mem, &status, *uaddr, stat.op, stat.val)
                .unwrap_or((*uaddr, LockKind::Futex, None));
            let histogram = histogram(stat);
            LockContention {
                futex: *uaddr,
                lock,
                symbol: names.name(lock),
                kind,
                idle: kind == LockKind::Condvar || (stat.wakes == 0 && stat.waits > 0),
                mutex,
                waits: stat.waits,
                wakes: stat.wakes,
                total_wait_ns: stat.total_ns,
                max_wait_ns: stat.max_ns,
                p99_wait_ns: percentile(&histogram, stat.waits, 99).min(stat.max_ns),
                histogram,
                top_waiters: Vec::new(),
                wakers: Vec::new(),
            }
        })
        .collect();
    // Contention first: an idle wait's length says nothing of a lock.
    out.sort_by(|a, b| {
        (a.idle, b.total_wait_ns, b.wakes, a.futex).cmp(&(
            b.idle,
            a.total_wait_ns,
            a.wakes,
            b.futex,
        ))
    });
    let index: HashMap<u64, usize> = out.iter().enumerate().map(|(i, l)| (l.futex, i)).collect();

    for (k, w) in &counted.waiters {
        let Some(&i) = index.get(&k.uaddr) else {
            continue;
        };
        out[i].top_waiters.push(LockWaiter {
            tid: k.tid,
            name: None,
            waits: w.waits,
            total_wait_ns: w.total_ns,
            max_wait_ns: w.max_ns,
        });
    }
    let mut wakers: HashMap<usize, Vec<(i64, &WakerStat)>> = HashMap::new();
    for (k, w) in &counted.wakers {
        if let Some(&i) = index.get(&k.uaddr) {
            wakers.entry(i).or_default().push((k.stack_id, w));
        }
    }
    for (i, l) in out.iter_mut().enumerate() {
        l.top_waiters
            .sort_by(|a, b| (b.total_wait_ns, a.tid).cmp(&(a.total_wait_ns, b.tid)));
        l.top_waiters.truncate(TOP_WAITERS);
        for w in &mut l.top_waiters {
            w.name = comms
                .entry(w.tid)
                .or_insert_with(|| {
                    discover::read_proc(pid, w.tid, "comm")
                        .ok()
                        .map(|c| c.trim_end_matches('\n').to_string())
                })
                .clone();
        }
        let mut ws = wakers.remove(&i).unwrap_or_default();
        ws.sort_by(|a, b| (b.1.wakes, a.0).cmp(&(a.1.wakes, b.0)));
        ws.truncate(TOP_WAKERS);
        l.wakers = ws
            .into_iter()
            .map(|(id, w)| {
                let fp = counted.stacks.get(&id).map_or(&[][..], Vec::as_slice);
                let addrs = waker_stack(fp, w, &maps, &mem);
                let stack = symbolizer.frames(&addrs);
                LockWaker {
                    wakes: w.wakes,
                    calls: w.calls,
                    tid: w.tid,
                    location: releaser(&stack, &maps),
                    stack,
                }
            })
            .collect();
    }
    let mut warnings = Vec::new();
    if let Some(lost) = &process.lost {
        warnings.push(format!(
            "{lost}: counted until then; locks are no longer named from its memory"
        ));
    }
    if counted.locks_full {
        warnings.push(format!(
            "more than {MAX_LOCKS} futex words were contended: the others were not counted"
        ));
    }
    LocksReport {
        schema: crate::model::SCHEMA_VERSION,
        process,
        window_ns,
        locks: out,
        warnings,
    }
}

/// The non-empty span of a lock's histogram (the kernel's buckets are
/// [`Log2Hist`]'s).
fn histogram(stat: &LockStat) -> Vec<Bucket> {
    let mut h = Log2Hist::default();
    for (i, &n) in stat.hist.iter().enumerate().filter(|(_, n)| **n > 0) {
        h.add(Log2Hist::bounds(i).0, n);
    }
    h.buckets()
}

/// The upper bound of the bucket holding the `pct`th percentile of
/// `total` waits (0 when there are none).
fn percentile(hist: &[Bucket], total: u64, pct: u64) -> u64 {
    let rank = (total * pct).div_ceil(100).max(1);
    let mut seen = 0;
    for b in hist {
        seen += b.count;
        if seen >= rank {
            return b.hi_ns;
        }
    }
    hist.last().map_or(0, |b| b.hi_ns)
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

/// The first frame outside libc and the loader: where the lock was
/// released.
fn releaser(stack: &[Frame], maps: &[MapsLine]) -> Option<Frame> {
    stack
        .iter()
        .find(|f| {
            let module = f
                .module
                .clone()
                .or_else(|| code_at(maps, f.addr).map(|m| m.name.clone()));
            module.is_some_and(|m| !is_libc(&m))
        })
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(buckets: &[(usize, u64)]) -> LockStat {
        let mut s = LockStat {
            waits: buckets.iter().map(|b| b.1).sum(),
            wakes: 0,
            total_ns: 0,
            max_ns: 0,
            op: 0,
            val: 0,
            hist: [0; rip_ebpf::contention::HIST_BUCKETS],
        };
        for &(i, n) in buckets {
            s.hist[i] = n;
        }
        s
    }

    #[test]
    fn histogram_spans_the_used_buckets_and_p99_is_a_bucket_bound() {
        // 100 waits of [4 ms, 8 ms) (bucket 23: [2^22, 2^23) ns), one of
        // [16 ms, 33 ms).
        let s = stat(&[(23, 100), (25, 1)]);
        let h = histogram(&s);
        assert_eq!(h.len(), 3);
        assert_eq!(
            (h[0].lo_ns, h[0].hi_ns, h[0].count),
            (1 << 22, 1 << 23, 100)
        );
        assert_eq!(h[1].count, 0, "empty buckets inside the span are kept");
        assert_eq!(percentile(&h, s.waits, 99), 1 << 23);
        assert_eq!(percentile(&h, s.waits, 100), 1 << 25);
        let zero = stat(&[(0, 2)]);
        assert_eq!(histogram(&zero)[0].hi_ns, 1);
        assert!(histogram(&stat(&[])).is_empty());
        assert_eq!(percentile(&[], 0, 99), 0);
        // The last bucket's bound does not overflow.
        let top = histogram(&stat(&[(63, 1)]));
        assert_eq!(top[0].hi_ns, 1 << 63);
    }

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
}
