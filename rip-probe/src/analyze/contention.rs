//! `rip-probe locks`: what the futex programs counted, turned into one
//! [`LocksReport`]: per lock its totals, percentile and histogram, the
//! threads that waited longest, and where the wakers were. Each lock's
//! kind, the waiters' names and the wakers' stacks come from the evidence
//! collect read (`collect::contention`), the names of locks and frames
//! from symbolize: nothing here reads the process.

use std::collections::HashMap;

use rip_ebpf::contention::{LockStat, WakerStat};

use crate::{
    analyze::hist::Log2Hist,
    collect::{
        contention::ContentionEvidence,
        kernel::contention::{Counted, MAX_LOCKS},
    },
    model::{
        Bucket, Frame, LockKind, ProcessInfo,
        contention::{LockContention, LockWaiter, LockWaker, LocksReport},
    },
};

/// Waiters listed per lock.
const TOP_WAITERS: usize = 5;
/// Waking stacks listed per lock.
const TOP_WAKERS: usize = 5;

/// Names for what the evidence holds, from the one symbolize pass.
#[derive(Clone, Debug, Default)]
pub struct Names {
    /// Each lock's name by its address (`g_table_lock`, `heap 0x…`).
    pub locks: HashMap<u64, Option<String>>,
    /// Each waker's frames by (futex word, stack id), one per address of
    /// its [`crate::collect::contention::WakerStack`].
    pub wakers: HashMap<(u64, i64), Vec<Frame>>,
}

/// Builds the report of `process` from what was `counted` over
/// `window_ns`, with what collect read beside the counts (`ev`) and the
/// names symbolize gave it (`names`).
pub fn report(
    counted: &Counted,
    ev: &ContentionEvidence,
    names: &Names,
    process: ProcessInfo,
    window_ns: u64,
) -> LocksReport {
    let mut out: Vec<LockContention> = counted
        .locks
        .iter()
        .map(|(uaddr, stat)| {
            let (lock, kind, mutex) =
                ev.locks
                    .get(uaddr)
                    .cloned()
                    .unwrap_or((*uaddr, LockKind::Futex, None));
            let histogram = histogram(stat);
            LockContention {
                futex: *uaddr,
                lock,
                symbol: names.locks.get(&lock).cloned().flatten(),
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
            name: ev.names.get(&k.tid).cloned().flatten(),
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
        let mut ws = wakers.remove(&i).unwrap_or_default();
        ws.sort_by(|a, b| (b.1.wakes, a.0).cmp(&(a.1.wakes, b.0)));
        ws.truncate(TOP_WAKERS);
        let futex = l.futex;
        l.wakers = ws
            .into_iter()
            .map(|(id, w)| {
                let stack = names.wakers.get(&(futex, id)).cloned().unwrap_or_default();
                let released = ev.wakers.get(&(futex, id)).and_then(|s| s.released_at);
                LockWaker {
                    wakes: w.wakes,
                    calls: w.calls,
                    tid: w.tid,
                    location: released.and_then(|at| stack.get(at).cloned()),
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

    fn process() -> ProcessInfo {
        ProcessInfo {
            pid: 1,
            exe: None,
            comm: None,
            alive: true,
            lost: None,
            ns_pid: None,
            title: None,
        }
    }

    fn frame(addr: u64, function: &str) -> Frame {
        Frame {
            addr,
            function: Some(function.into()),
            ..Frame::default()
        }
    }

    /// A report made from constructed counts and evidence, as `rip-probe
    /// locks` makes it from a live process's: the contended lock first,
    /// known by the layout the evidence read and the name symbolize gave
    /// it; the longest waiters, named; the wakers by wakes, each released
    /// where the evidence says its stack left libc. A word with no
    /// evidence is a plain futex; waits nobody woke are idle, last.
    #[test]
    fn a_report_is_made_from_evidence_alone() {
        use rip_ebpf::contention::{WaiterKey, WaiterStat, WakerKey};

        use crate::{
            collect::contention::WakerStack,
            model::{LockKind, MutexFlavor},
        };
        const MUTEX: u64 = 0x5000;
        const POLL: u64 = 0x6000;
        let mut contended = stat(&[(20, 10)]);
        contended.wakes = 10;
        contended.total_ns = 10_000_000;
        contended.max_ns = 2_000_000;
        let mut idle = stat(&[(30, 3)]);
        idle.total_ns = 3_000_000_000;
        let waiter = |tid, total_ns| {
            (
                WaiterKey {
                    uaddr: MUTEX,
                    tid,
                    _pad: 0,
                },
                WaiterStat {
                    waits: 1,
                    total_ns,
                    max_ns: total_ns,
                },
            )
        };
        let waker = |stack_id, wakes| {
            (
                WakerKey {
                    uaddr: MUTEX,
                    stack_id,
                },
                WakerStat {
                    wakes,
                    calls: wakes,
                    tid: 7,
                    ..WakerStat::default()
                },
            )
        };
        let counted = Counted {
            locks: vec![(POLL, idle), (MUTEX, contended)],
            waiters: (1..=7).map(|t| waiter(t, u64::from(t) * 1000)).collect(),
            wakers: vec![waker(1, 3), waker(2, 7)],
            stacks: HashMap::new(),
            locks_full: false,
        };
        let flavor = MutexFlavor::default();
        let ev = ContentionEvidence {
            locks: HashMap::from([(MUTEX, (MUTEX, LockKind::Mutex, Some(flavor)))]),
            names: (1..=7).map(|t| (t, Some(format!("worker-{t}")))).collect(),
            wakers: HashMap::from([
                (
                    (MUTEX, 2),
                    WakerStack {
                        addrs: vec![0x7000, 0x400, 0x500],
                        released_at: Some(1),
                    },
                ),
                (
                    (MUTEX, 1),
                    WakerStack {
                        addrs: vec![0x7000],
                        released_at: None,
                    },
                ),
            ]),
        };
        let names = Names {
            locks: HashMap::from([(MUTEX, Some("g_table_lock".into())), (POLL, None)]),
            wakers: HashMap::from([(
                (MUTEX, 2),
                vec![
                    frame(0x7000, "__lll_unlock_wake"),
                    frame(0x400, "table_put"),
                    frame(0x500, "main"),
                ],
            )]),
        };
        let r = report(&counted, &ev, &names, process(), 1_000_000_000);
        let [first, last] = &r.locks[..] else {
            panic!("two locks: {:?}", r.locks);
        };
        assert_eq!(
            (first.futex, first.kind, first.idle),
            (MUTEX, LockKind::Mutex, false)
        );
        assert_eq!(first.symbol.as_deref(), Some("g_table_lock"));
        assert!(first.mutex.is_some());
        assert_eq!(
            (last.futex, last.lock, last.kind, last.idle),
            (POLL, POLL, LockKind::Futex, true),
            "no evidence: the word itself, a plain futex; nobody woke it: idle"
        );
        assert_eq!(last.symbol, None);
        let top: Vec<(u32, Option<&str>)> = first
            .top_waiters
            .iter()
            .map(|w| (w.tid, w.name.as_deref()))
            .collect();
        assert_eq!(
            top,
            [
                (7, Some("worker-7")),
                (6, Some("worker-6")),
                (5, Some("worker-5")),
                (4, Some("worker-4")),
                (3, Some("worker-3")),
            ]
        );
        let wakers: Vec<(u64, Option<&str>, usize)> = first
            .wakers
            .iter()
            .map(|w| {
                let at = w.location.as_ref().and_then(|f| f.function.as_deref());
                (w.wakes, at, w.stack.len())
            })
            .collect();
        assert_eq!(
            wakers,
            [(7, Some("table_put"), 3), (3, None, 0)],
            "most wakes first; released where the stack left libc; an unnamed stack has no place"
        );
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    }
}
