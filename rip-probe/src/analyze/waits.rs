//! The wait-for graph, computed from the lock evidence collect gathered
//! (`collect::locks::evidence`): each thread blocked on a lock points at
//! the lock's owner; following the owners gives a chain that ends at a
//! thread that waits for no lock (the one to look at), or comes back to a
//! thread already on it: a deadlock. Nothing here reads the process.
//!
//! An owner is claimed only when the evidence holds still: the lock read
//! twice gave the same owner, the waiter was still in that wait between
//! the reads, and the owner was not itself waiting for the lock (on a hot
//! lock the owner read is often a thread that has released it and queued
//! again). A thread waiting for a lock it owns is a deadlock only for a
//! normal mutex, the one kind a relock by its owner blocks forever; a
//! cycle is a deadlock only when a second look a few milliseconds later
//! finds every wait of it unchanged.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::{
    collect::locks::{LockEvidence, LockReads, SYS_FUTEX, SYS_FUTEX_WAITV, WAIT_KEY_ARGS, WaitKey},
    model::{Frame, LockChange, LockKind, Owner, Report, RuntimeWait, Thread, WaitsFor},
};

/// A thread's futex wait, keyed as `collect::locks` keys the waits it
/// read (the syscall and its first [`WAIT_KEY_ARGS`] arguments).
fn wait_key(t: &Thread) -> Option<WaitKey> {
    let s = t.syscall.as_ref()?;
    if !matches!(s.nr, SYS_FUTEX | SYS_FUTEX_WAITV) {
        return None;
    }
    let mut args = [0u64; 6];
    for (a, v) in args.iter_mut().zip(&s.args).take(WAIT_KEY_ARGS) {
        *a = v.raw;
    }
    Some((s.nr, args))
}

/// Fills each futex waiter's [`WaitsFor`] from the evidence `ev`, with
/// the locks' names from `names` (by lock address). Returns the cycles of waits seen: deadlocks once
/// [`confirm`] has found them again on a second look (`report.deadlocks`
/// is left to it).
pub fn fill(
    report: &mut Report,
    ev: &LockEvidence,
    names: &HashMap<u64, Option<String>>,
) -> Vec<Vec<u32>> {
    let mut stacks = StackWaits::default();
    // Threads waiting on one lock come in runs (a pool): its reads are
    // looked up once per run.
    let mut last: Option<(WaitKey, Option<&LockReads>)> = None;
    for t in &mut report.threads {
        let (Some(key), Ok(tid)) = (wait_key(t), u32::try_from(t.tid)) else {
            continue;
        };
        let reads = match last {
            Some((k, r)) if k == key => r,
            _ => {
                let r = ev.locks.get(&key).and_then(Option::as_ref);
                last = Some((key, r));
                r
            }
        };
        let Some(reads) = reads else {
            continue;
        };
        let says = stacks.of(&t.frames);
        let (wait, owner_tid) = judge(tid, key, reads, &ev.now, says);
        t.waits_for = Some(WaitsFor {
            symbol: names.get(&wait.lock).cloned().flatten(),
            owner_tid,
            ..wait
        });
    }
    wait_graph(&edges(report)).deadlocks
}

/// The cycles of the waits the report's threads are in now: those
/// [`fill`] judged, and those a language runtime's locks added since
/// (a CPython `RLock`'s owner): candidates for [`confirm`].
pub fn cycles(report: &Report) -> Vec<Vec<u32>> {
    wait_graph(&edges(report)).deadlocks
}

/// The cycles among `candidates` (from [`fill`] or [`cycles`]) that a
/// second look a few milliseconds later shows unchanged — each of their
/// waits on the same lock with the same owner — become
/// `report.deadlocks`. The second look is `second`, futex evidence read
/// again for their threads, and `runtime`, the waits a runtime's locks
/// were looked at again for (a CPython lock waiter's edge, from what its
/// interpreter recorded; it replaces what the futex evidence says of that
/// thread). The waits of the others are "changing hands": no owner is
/// claimed for them.
pub fn confirm(
    report: &mut Report,
    candidates: &[Vec<u32>],
    second: &LockEvidence,
    runtime: &BTreeMap<u32, WaitEdge>,
) {
    let before = edges(report);
    let mut again = BTreeMap::new();
    let mut stacks = StackWaits::default();
    for t in &report.threads {
        let (Some(key), Ok(tid)) = (wait_key(t), u32::try_from(t.tid)) else {
            continue;
        };
        if let Some(Some(reads)) = second.locks.get(&key) {
            let (w, owner) = judge(tid, key, reads, &second.now, stacks.of(&t.frames));
            again.insert(
                tid,
                WaitEdge {
                    lock: w.lock,
                    owner,
                },
            );
        }
    }
    again.extend(runtime.iter().map(|(&tid, &e)| (tid, e)));
    let mut gone = BTreeSet::new();
    for cycle in candidates {
        if cycle
            .iter()
            .all(|tid| before.get(tid).is_some_and(|e| again.get(tid) == Some(e)))
        {
            report.deadlocks.push(cycle.clone());
        } else {
            gone.extend(cycle.iter().copied());
        }
    }
    for t in &mut report.threads {
        if let (Some(w), Ok(tid)) = (&mut t.waits_for, u32::try_from(t.tid))
            && gone.contains(&tid)
        {
            w.owner = Owner::Changing {
                cause: LockChange::CycleGone,
            };
            w.owner_tid = None;
        }
    }
}

/// The report's waits with a claimed owner, as graph edges.
fn edges(report: &Report) -> BTreeMap<u32, WaitEdge> {
    report
        .threads
        .iter()
        .filter_map(|t| {
            let w = t.waits_for.as_ref()?;
            Some((
                u32::try_from(t.tid).ok()?,
                WaitEdge {
                    lock: w.lock,
                    owner: w.owner_tid,
                },
            ))
        })
        .collect()
}

/// What thread `tid`, in wait `key`, waits for according to `reads` and
/// the waits threads were in (`now`); its user stack `frames` says when
/// the futex belongs to a language runtime.
/// What a waiter's stack says of its wait, whatever the lock's words
/// look like: a language runtime's own wait, a Rust lock's slow path, or
/// glibc's semaphore wait.
#[derive(Clone, Copy, Debug, Default)]
struct StackSays {
    runtime: Option<RuntimeWait>,
    rust_lock: Option<&'static str>,
    semaphore: bool,
}

impl StackSays {
    fn of(frames: &[Frame]) -> StackSays {
        let names = function_names(frames);
        StackSays {
            runtime: runtime_wait(&names),
            rust_lock: rust_lock_type(&names),
            semaphore: names
                .iter()
                .any(|n| SEM_WAITS.iter().any(|s| n.contains(s))),
        }
    }
}

/// [`StackSays`] of each distinct stack, read once: the threads blocked
/// in one place share their stack (by address), and thousands of them
/// would otherwise have the same names matched thousands of times.
#[derive(Default)]
struct StackWaits(crate::util::FastMap<(*const Frame, usize), StackSays>);

impl StackWaits {
    fn of(&mut self, frames: &std::sync::Arc<[Frame]>) -> StackSays {
        *self
            .0
            .entry((frames.as_ptr(), frames.len()))
            .or_insert_with(|| StackSays::of(frames))
    }
}

fn judge(
    tid: u32,
    key: WaitKey,
    reads: &LockReads,
    now: &HashMap<u32, Option<(i64, u64)>>,
    says: StackSays,
) -> (WaitsFor, Option<u32>) {
    let l = &reads.first;
    let mut wait = WaitsFor {
        lock: l.addr,
        futex: l.futex,
        symbol: None,
        kind: l.kind,
        mutex: l.mutex.clone(),
        runtime: None,
        owner: l.owner.clone(),
        owner_tid: None,
    };
    // A runtime's own futex is never read as a glibc lock, whatever its
    // words look like.
    if let Some(rt) = says.runtime {
        wait.kind = match rt {
            RuntimeWait::GoRuntimeLock | RuntimeWait::GoFutex | RuntimeWait::PythonLock => {
                LockKind::Runtime
            }
            _ => LockKind::Parked,
        };
        wait.lock = l.futex;
        wait.mutex = None;
        wait.runtime = Some(rt);
        wait.owner = Owner::NotRecorded {
            reason: "a runtime's wait: it records no owner".into(),
        };
        return (wait, None);
    }
    if let Some(ty) = says.rust_lock {
        wait.kind = LockKind::Futex;
        wait.lock = l.futex;
        wait.mutex = None;
        wait.owner = Owner::NotRecorded {
            reason: format!(
                "a {ty} (its waiter is in the lock's slow path): this lock type records no owner"
            ),
        };
        return (wait, None);
    }
    // glibc's semaphore waits (a JVM's GC workers, PostgreSQL's): a
    // count, whatever its word looks like.
    if says.semaphore {
        wait.kind = LockKind::Semaphore;
        wait.lock = l.futex;
        wait.mutex = None;
        wait.owner = Owner::NotRecorded {
            reason: "a semaphore records no owner".into(),
        };
        return (wait, None);
    }
    let Some(owner) = reads.owner else {
        // No live thread of ours is claimed: nothing to hold still but the
        // words themselves.
        if l.owner != reads.second.owner && matches!(l.owner, Owner::Readers { .. }) {
            wait.owner = changing(LockChange::ReadsDisagree);
        }
        return (wait, None);
    };
    let at = |t: u32| now.get(&t).copied().flatten();
    let size = match l.kind {
        LockKind::Rwlock => 56,
        LockKind::Condvar => 48,
        _ => 40,
    };
    let on_this_lock = |w: Option<(i64, u64)>| {
        w.is_some_and(|(_, a)| a == l.futex || a.wrapping_sub(l.addr) < size)
    };
    let cause = if reads.first != reads.second {
        Some(LockChange::ReadsDisagree)
    } else if at(tid) != Some((key.0, key.1[0])) {
        Some(LockChange::WaitEnded)
    } else if owner == tid {
        // Only a normal mutex blocks its owner's relock: an error-checking
        // mutex returns EDEADLK, a recursive one counts, an rwlock and a PI
        // futex return EDEADLK. Any other self-owned wait is a stale read.
        let relock_blocks = l.kind == LockKind::Mutex
            && l.mutex
                .as_ref()
                .is_some_and(|f| matches!(f.kind, "normal" | "adaptive") && !f.pi);
        (!relock_blocks).then_some(LockChange::OwnerWaitsForIt)
    } else if on_this_lock(at(owner)) {
        Some(LockChange::OwnerWaitsForIt)
    } else {
        None
    };
    match cause {
        Some(c) => {
            wait.owner = changing(c);
            (wait, None)
        }
        None => (wait, Some(owner)),
    }
}

fn changing(cause: LockChange) -> Owner {
    Owner::Changing { cause }
}

/// Function names of the top [`FRAMES`] frames of a stack, innermost
/// first, inlined functions included.
fn function_names(frames: &[Frame]) -> Vec<String> {
    frames
        .iter()
        .take(FRAMES)
        .flat_map(|f| {
            f.inlined
                .iter()
                .rev()
                .map(|i| i.function.as_str())
                .chain(f.function.as_deref())
        })
        // Rust's v0 mangling demangles methods as `<path::Type>::method`.
        .map(|f| f.replace(['<', '>'], ""))
        .collect()
}

/// The language runtime's wait a stack is in: Go's futex sleeps (what
/// for, by the runtime function above), Rust's `thread::park`.
fn runtime_wait(names: &[String]) -> Option<RuntimeWait> {
    let any = |p: &dyn Fn(&str) -> bool| names.iter().any(|n| p(n));
    if any(&|n| n == "runtime.futex" || n == "runtime.futexsleep") {
        return Some(
            if any(&|n| n == "runtime.lock2" || n == "runtime.lockWithRank") {
                RuntimeWait::GoRuntimeLock
            } else if any(&|n| n.starts_with("runtime.notetsleep")) {
                RuntimeWait::GoTimedNote
            } else if any(&|n| n == "runtime.notesleep") {
                if any(&|n| n == "runtime.stopm" || n == "runtime.mPark") {
                    RuntimeWait::GoIdleM
                } else {
                    RuntimeWait::GoNote
                }
            } else {
                RuntimeWait::GoFutex
            },
        );
    }
    if any(&|n| n == "PyThread_acquire_lock_timed") {
        return Some(RuntimeWait::PythonLock);
    }
    // Rust's parker is std's (`std::sys::…::Parker::park`); HotSpot's is
    // a C++ `Parker::park`, LockSupport.park's.
    let parker = |n: &str| n.contains("Parker::park");
    if rust_lock_type(names).is_none()
        && any(&|n| n.contains("std::thread::park") || (n.starts_with("std::") && parker(n)))
    {
        return Some(RuntimeWait::RustPark);
    }
    if any(&|n| parker(n) && !n.starts_with("std::")) && any(&|n| n.contains("Unsafe_Park")) {
        return Some(RuntimeWait::JavaPark);
    }
    None
}

/// What a waiter's frames say about the lock it waits for: a function
/// name's fragments (all must appear) and the lock type they belong to.
const SLOW_PATHS: &[(&[&str], &str)] = &[
    // std's futex locks (`sys::sync::mutex::futex`, formerly
    // `sys::unix::locks::futex_mutex`).
    (&["futex", "Mutex::lock_contended"], "Rust std::sync::Mutex"),
    (
        &["futex", "RwLock::read_contended"],
        "Rust std::sync::RwLock",
    ),
    (
        &["futex", "RwLock::write_contended"],
        "Rust std::sync::RwLock",
    ),
    (&["futex", "Condvar::wait"], "Rust std::sync::Condvar"),
    (
        &["parking_lot::raw_mutex::RawMutex::lock_slow"],
        "parking_lot Mutex",
    ),
    (
        &["parking_lot::raw_rwlock::RawRwLock::lock_"],
        "parking_lot RwLock",
    ),
    (
        &["parking_lot::condvar::Condvar::wait"],
        "parking_lot Condvar",
    ),
];

/// glibc's semaphore wait functions (`sem_wait`, `sem_timedwait`,
/// `sem_clockwait` all sleep in `__new_sem_wait_slow64`).
const SEM_WAITS: &[&str] = &[
    "__new_sem_wait_slow",
    "sem_wait",
    "sem_timedwait",
    "sem_clockwait",
];

/// Frames looked at from the top of the waiter's stack: the slow path is
/// a few calls above the futex syscall.
const FRAMES: usize = 12;

/// The Rust lock type whose slow path one of `names` is.
fn rust_lock_type(names: &[String]) -> Option<&'static str> {
    names.iter().find_map(|f| {
        SLOW_PATHS
            .iter()
            .find(|(parts, _)| parts.iter().all(|p| f.contains(p)))
            .map(|(_, ty)| *ty)
    })
}

/// One thread's wait: the lock it awaits and the lock's owner, if known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitEdge {
    /// The lock's address.
    pub lock: u64,
    /// The owning thread, when the lock records one that is alive.
    pub owner: Option<u32>,
}

/// The graph's reading.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WaitGraph {
    /// For each waiting thread, the threads its chain passes through after
    /// it, in order: the owner of its lock, that owner's lock's owner, …
    /// up to a thread that waits for no lock, or up to the first thread of
    /// a cycle (which then appears twice in `[tid] + chain`).
    pub chains: BTreeMap<u32, Vec<u32>>,
    /// Each cycle once, smallest tid first, in wait order: a deadlock.
    pub deadlocks: Vec<Vec<u32>>,
}

/// Follows every waiting thread to the end of its chain. Linear in the
/// total length of the chains; each cycle is reported once.
pub fn wait_graph(waits: &BTreeMap<u32, WaitEdge>) -> WaitGraph {
    let mut out = WaitGraph::default();
    let mut cycles: BTreeSet<Vec<u32>> = BTreeSet::new();
    for &start in waits.keys() {
        let mut chain = Vec::new();
        let mut seen = BTreeSet::from([start]);
        let mut at = start;
        while let Some(next) = waits.get(&at).and_then(|e| e.owner) {
            chain.push(next);
            if !seen.insert(next) {
                // `next` closes a cycle: the part of the path from its
                // first visit on.
                let path: Vec<u32> = std::iter::once(start)
                    .chain(chain.iter().copied())
                    .collect();
                let first = path.iter().position(|&t| t == next).unwrap_or(0);
                cycles.insert(canonical(&path[first..path.len() - 1]));
                break;
            }
            at = next;
        }
        out.chains.insert(start, chain);
    }
    out.deadlocks = cycles.into_iter().collect();
    out
}

/// A cycle rotated to start at its smallest tid.
fn canonical(cycle: &[u32]) -> Vec<u32> {
    let min = cycle
        .iter()
        .enumerate()
        .min_by_key(|&(_, t)| *t)
        .map_or(0, |(i, _)| i);
    cycle[min..].iter().chain(&cycle[..min]).copied().collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{
        collect::locks::{AwaitedLock, SYS_FUTEX},
        model::{Mode, MutexFlavor, ProcessInfo, StackTable, Syscall, SyscallArg, ThreadState},
    };

    /// FUTEX_WAIT_PRIVATE, as glibc's mutex waiters pass it.
    const WAIT: u64 = 128;

    fn key(uaddr: u64) -> WaitKey {
        (SYS_FUTEX, [uaddr, WAIT, 2, 0, 0, 0])
    }

    /// Thread `tid` blocked in futex(`uaddr`, WAIT, 2), with a user stack
    /// of `functions` (innermost first).
    fn waiter(tid: u64, uaddr: u64, functions: &[&str]) -> Thread {
        let (nr, args) = key(uaddr);
        Thread {
            tid,
            ns_tid: None,
            name: format!("t{tid}"),
            name_source: "comm",
            state: ThreadState::Sleeping,
            syscall: Some(std::sync::Arc::new(Syscall {
                nr,
                name: "futex".into(),
                args: args
                    .iter()
                    .map(|&raw| SyscallArg {
                        name: "arg",
                        raw,
                        text: format!("{raw:#x}"),
                    })
                    .collect(),
                text: "futex(…)".into(),
            })),
            blocked: None,
            kernel_stack: Arc::from(Vec::new()),
            location: None,
            history: Vec::new(),
            snaps: None,
            exited: false,
            polling_task: None,
            waits_for: None,
            frames: functions
                .iter()
                .enumerate()
                .map(|(i, f)| Frame {
                    addr: 0x1000 + i as u64,
                    function: Some((*f).into()),
                    ..Frame::default()
                })
                .collect(),
            stack_samples: None,
            python: None,
        }
    }

    fn report(threads: Vec<Thread>) -> Report {
        Report {
            schema: crate::model::SCHEMA_VERSION,
            mode: Mode::Pid,
            process: ProcessInfo {
                pid: 1,
                exe: None,
                comm: None,
                alive: true,
                lost: None,
                ns_pid: None,
                title: None,
            },
            rings: Vec::new(),
            window_ns: 0,
            stacks: StackTable,
            threads,
            tasks: Vec::new(),
            groups: Vec::new(),
            task_groups: Vec::new(),
            warnings: Vec::new(),
            deadlocks: Vec::new(),
            python: None,
        }
    }

    fn mutex(uaddr: u64, kind: &'static str, owner: Owner) -> AwaitedLock {
        AwaitedLock {
            addr: uaddr,
            futex: uaddr,
            kind: LockKind::Mutex,
            mutex: Some(MutexFlavor {
                kind,
                ..MutexFlavor::default()
            }),
            owner,
        }
    }

    /// Evidence builder: locks read twice, the waits threads were in.
    #[derive(Default)]
    struct Ev(LockEvidence);

    impl Ev {
        /// The lock at `uaddr` read as `first`, then as `second`.
        fn lock(mut self, uaddr: u64, first: AwaitedLock, second: AwaitedLock) -> Self {
            let owner = first.owner.tid();
            self.0.locks.insert(
                key(uaddr),
                Some(LockReads {
                    first,
                    second,
                    owner,
                }),
            );
            self
        }
        /// The same reading twice: a lock that held still.
        fn still(self, uaddr: u64, l: AwaitedLock) -> Self {
            self.lock(uaddr, l.clone(), l)
        }
        /// Thread `tid` was waiting on `uaddr` (0: in no futex wait).
        fn now(mut self, tid: u32, uaddr: u64) -> Self {
            self.0
                .now
                .insert(tid, (uaddr != 0).then_some((SYS_FUTEX, uaddr)));
            self
        }
    }

    fn owner_of(r: &Report, tid: u64) -> (Owner, Option<u32>) {
        let w = r
            .threads
            .iter()
            .find(|t| t.tid == tid)
            .and_then(|t| t.waits_for.as_ref())
            .unwrap();
        (w.owner.clone(), w.owner_tid)
    }

    /// fill, then (as the session does) confirm with `second`.
    fn judge_all(r: &mut Report, first: &LockEvidence, second: &LockEvidence) {
        let cycles = fill(r, first, &HashMap::new());
        confirm(r, &cycles, second, &BTreeMap::new());
    }

    const A: u64 = 0x1000;
    const B: u64 = 0x2000;

    #[test]
    fn a_hot_mutex_is_never_a_self_wait_nor_a_deadlock() {
        // Thread 10 was queued when the kernel snapshot was taken; by the
        // time the lock was read it had got it: the lock names 10 as its
        // owner, and 10 is in no wait any more.
        let mut r = report(vec![waiter(10, A, &[]), waiter(11, A, &[])]);
        let me = mutex(A, "normal", Owner::Thread { tid: 10 });
        let ev = Ev::default().still(A, me).now(10, 0).now(11, A).0;
        judge_all(&mut r, &ev, &ev);
        assert!(r.deadlocks.is_empty());
        assert_eq!(
            owner_of(&r, 10),
            (
                Owner::Changing {
                    cause: LockChange::WaitEnded
                },
                None
            )
        );
        // 11 still waits, and 10 (doing its work) holds the lock.
        assert_eq!(owner_of(&r, 11), (Owner::Thread { tid: 10 }, Some(10)));
    }

    #[test]
    fn an_owner_queued_for_its_own_lock_or_reads_that_disagree_claim_no_owner() {
        // 12 was read as the owner but had queued for the lock again
        // since the kernel snapshot.
        let mut r = report(vec![waiter(11, A, &[])]);
        let l = mutex(A, "normal", Owner::Thread { tid: 12 });
        let ev = Ev::default().still(A, l).now(11, A).now(12, A).0;
        judge_all(&mut r, &ev, &ev);
        let changing = Owner::Changing {
            cause: LockChange::OwnerWaitsForIt,
        };
        assert_eq!(owner_of(&r, 11), (changing, None));
        assert!(r.deadlocks.is_empty());
        // The owner moved between the two reads.
        let mut r = report(vec![waiter(11, A, &[])]);
        let ev = Ev::default()
            .lock(
                A,
                mutex(A, "normal", Owner::Thread { tid: 12 }),
                mutex(A, "normal", Owner::Thread { tid: 13 }),
            )
            .now(11, A)
            .now(12, 0)
            .0;
        judge_all(&mut r, &ev, &ev);
        assert_eq!(
            owner_of(&r, 11),
            (
                Owner::Changing {
                    cause: LockChange::ReadsDisagree
                },
                None
            )
        );
    }

    #[test]
    fn only_a_normal_mutex_relocked_by_its_owner_is_a_self_deadlock() {
        for (kind, deadlock) in [
            ("normal", true),
            ("adaptive", true),
            ("errorcheck", false),
            ("recursive", false),
        ] {
            let mut r = report(vec![waiter(10, A, &[])]);
            let l = mutex(A, kind, Owner::Thread { tid: 10 });
            let ev = Ev::default().still(A, l).now(10, A).0;
            judge_all(&mut r, &ev, &ev);
            if deadlock {
                assert_eq!(r.deadlocks, [vec![10]], "{kind}");
                assert_eq!(owner_of(&r, 10).1, Some(10), "{kind}");
            } else {
                // It would have returned EDEADLK (or counted): a stale read.
                assert!(r.deadlocks.is_empty(), "{kind}");
                assert_eq!(
                    owner_of(&r, 10),
                    (
                        Owner::Changing {
                            cause: LockChange::OwnerWaitsForIt
                        },
                        None
                    ),
                    "{kind}"
                );
            }
        }
    }

    #[test]
    fn a_cycle_is_a_deadlock_only_if_a_second_look_finds_it_again() {
        let abba = || report(vec![waiter(10, A, &[]), waiter(11, B, &[])]);
        let first = Ev::default()
            .still(A, mutex(A, "normal", Owner::Thread { tid: 11 }))
            .still(B, mutex(B, "normal", Owner::Thread { tid: 10 }))
            .now(10, A)
            .now(11, B)
            .0;
        let mut r = abba();
        judge_all(&mut r, &first, &first);
        assert_eq!(r.deadlocks, [vec![10, 11]]);
        assert_eq!(owner_of(&r, 10), (Owner::Thread { tid: 11 }, Some(11)));
        // A few ms later B has changed hands: no deadlock, and no owner
        // claimed for either wait of the cycle.
        let later = Ev::default()
            .still(A, mutex(A, "normal", Owner::Thread { tid: 11 }))
            .still(B, mutex(B, "normal", Owner::Thread { tid: 12 }))
            .now(10, A)
            .now(11, B)
            .now(12, 0)
            .0;
        let mut r = abba();
        judge_all(&mut r, &first, &later);
        assert!(r.deadlocks.is_empty());
        for tid in [10, 11] {
            assert_eq!(
                owner_of(&r, tid),
                (
                    Owner::Changing {
                        cause: LockChange::CycleGone
                    },
                    None
                )
            );
        }
        // Or a waiter of it is no longer waiting.
        let ended = Ev(first.clone()).now(11, 0).0;
        let mut r = abba();
        judge_all(&mut r, &first, &ended);
        assert!(r.deadlocks.is_empty());
    }

    #[test]
    fn a_cycle_through_a_mutex_and_a_runtime_s_lock_is_confirmed_by_both_second_looks() {
        // 10 waits for mutex A held by 11; 11 waits for a CPython RLock
        // (0xb0) held by 10, as the interpreter's read judged it.
        let mixed = || {
            let mut r = report(vec![
                waiter(10, A, &[]),
                waiter(11, B, &["PyThread_acquire_lock_timed"]),
            ]);
            // 11's futex: a CPython lock's semaphore, no layout with an
            // owner.
            let sem = AwaitedLock {
                addr: B,
                futex: B,
                kind: LockKind::Futex,
                mutex: None,
                owner: Owner::NotRecorded {
                    reason: "a semaphore".into(),
                },
            };
            let ev = Ev::default()
                .still(A, mutex(A, "normal", Owner::Thread { tid: 11 }))
                .still(B, sem)
                .now(10, A)
                .now(11, B)
                .0;
            fill(&mut r, &ev, &HashMap::new());
            // What the interpreter's read makes of 11's wait.
            let w = r.threads[1].waits_for.as_mut().unwrap();
            assert_eq!(w.runtime, Some(RuntimeWait::PythonLock));
            (w.lock, w.owner, w.owner_tid) = (0xb0, Owner::Thread { tid: 10 }, Some(10));
            (r, ev)
        };
        let (mut r, ev) = mixed();
        let cycles = cycles(&r);
        assert_eq!(cycles, [vec![10, 11]]);
        let edge = |owner| BTreeMap::from([(11, WaitEdge { lock: 0xb0, owner })]);
        confirm(&mut r, &cycles, &ev, &edge(Some(10)));
        assert_eq!(r.deadlocks, [vec![10, 11]]);
        // The RLock's second look found it released, or none was taken:
        // no deadlock, whatever the mutex's says.
        for runtime in [edge(None), BTreeMap::new()] {
            let (mut r, ev) = mixed();
            confirm(&mut r, &cycles, &ev, &runtime);
            assert!(r.deadlocks.is_empty(), "{runtime:?}");
        }
    }

    #[test]
    fn runtime_futexes_are_the_runtime_s_waits_never_glibc_locks() {
        // An idle Go M on its note, whose words happen to fit a read-locked
        // glibc rwlock.
        let go_m = [
            "runtime.futex",
            "runtime.notesleep",
            "runtime.mPark",
            "runtime.stopm",
            "runtime.findRunnable",
        ];
        let sysmon = [
            "runtime.futex",
            "runtime.notetsleep_internal",
            "runtime.notetsleep",
            "runtime.sysmon",
        ];
        let lock2 = ["runtime.futex", "runtime.futexsleep", "runtime.lock2"];
        let java = [
            "__futex_abstimed_wait_common",
            "___pthread_cond_wait",
            "Parker::park(bool, long)",
            "Unsafe_Park",
        ];
        let python = [
            "__futex_abstimed_wait_common",
            "__new_sem_wait_slow64",
            "PyThread_acquire_lock_timed",
            "PyObject_Vectorcall",
        ];
        let park = [
            "syscall",
            "std::sys::pal::unix::futex::futex_wait",
            "<std::sys::sync::thread_parking::futex::Parker>::park",
            "std::thread::park",
            "worker::run",
        ];
        let rwlock = AwaitedLock {
            addr: A - 8,
            futex: A,
            kind: LockKind::Rwlock,
            mutex: None,
            owner: Owner::Readers { count: 8320 },
        };
        for (stack, kind, rt) in [
            (&go_m[..], LockKind::Parked, RuntimeWait::GoIdleM),
            (&sysmon[..], LockKind::Parked, RuntimeWait::GoTimedNote),
            (&lock2[..], LockKind::Runtime, RuntimeWait::GoRuntimeLock),
            (&park[..], LockKind::Parked, RuntimeWait::RustPark),
            (&python[..], LockKind::Runtime, RuntimeWait::PythonLock),
            (&java[..], LockKind::Parked, RuntimeWait::JavaPark),
        ] {
            let mut r = report(vec![waiter(10, A, stack)]);
            let ev = Ev::default().still(A, rwlock.clone()).now(10, A).0;
            judge_all(&mut r, &ev, &ev);
            let w = r.threads[0].waits_for.as_ref().unwrap();
            assert_eq!(
                (w.kind, w.runtime, w.lock),
                (kind, Some(rt), A),
                "{stack:?}"
            );
            assert!(
                matches!(w.owner, Owner::NotRecorded { .. }) && w.owner_tid.is_none(),
                "{stack:?}: {:?}",
                w.owner
            );
            assert!(w.mutex.is_none());
        }
        // A glibc semaphore (a JVM's GC worker), whatever its word.
        let sem = [
            "__futex_abstimed_wait_common",
            "__new_sem_wait_slow64",
            "PosixSemaphore::wait()",
        ];
        let mut r = report(vec![waiter(10, A, &sem)]);
        let ev = Ev::default().still(A, rwlock.clone()).now(10, A).0;
        judge_all(&mut r, &ev, &ev);
        let w = r.threads[0].waits_for.as_ref().unwrap();
        assert_eq!(
            (w.kind, w.lock, w.owner_tid),
            (LockKind::Semaphore, A, None)
        );
        assert!(matches!(w.owner, Owner::NotRecorded { .. }));
        // A Rust std Mutex's slow path is its lock, not a park.
        let std_mutex = [
            "std::sys::pal::unix::futex::futex_wait",
            "<std::sys::sync::mutex::futex::Mutex>::lock_contended",
        ];
        let mut r = report(vec![waiter(10, A, &std_mutex)]);
        let ev = Ev::default().still(A, rwlock.clone()).now(10, A).0;
        judge_all(&mut r, &ev, &ev);
        let w = r.threads[0].waits_for.as_ref().unwrap();
        assert_eq!((w.kind, w.runtime), (LockKind::Futex, None));
        assert!(
            matches!(&w.owner, Owner::NotRecorded { reason } if reason.contains("Rust std::sync::Mutex"))
        );
    }

    #[test]
    fn slow_paths_name_their_lock_type() {
        let names =
            |v: &[&str]| -> Vec<String> { v.iter().map(|s| s.replace(['<', '>'], "")).collect() };
        let std_mutex = [
            "syscall",
            "std::sys::pal::unix::futex::futex_wait",
            "<std::sys::sync::mutex::futex::Mutex>::lock_contended",
            "std::sync::poison::mutex::Mutex<T>::lock",
        ];
        assert_eq!(
            rust_lock_type(&names(&std_mutex)),
            Some("Rust std::sync::Mutex")
        );
        assert_eq!(
            rust_lock_type(&names(&[
                "<std::sys::sync::rwlock::futex::RwLock>::write_contended"
            ])),
            Some("Rust std::sync::RwLock")
        );
        assert_eq!(
            rust_lock_type(&names(&[
                "std::sys::unix::locks::futex_mutex::Mutex::lock_contended"
            ])),
            Some("Rust std::sync::Mutex")
        );
        assert_eq!(
            rust_lock_type(&names(&["parking_lot::raw_mutex::RawMutex::lock_slow"])),
            Some("parking_lot Mutex")
        );
        // A pthread mutex, or a lock of no known type: no evidence.
        assert_eq!(
            rust_lock_type(&names(&["__lll_lock_wait", "pthread_mutex_lock"])),
            None
        );
        assert_eq!(
            rust_lock_type(&names(&["my_lock::Mutex::lock_contended"])),
            None
        );
    }

    fn edges(e: &[(u32, u32)]) -> BTreeMap<u32, WaitEdge> {
        e.iter()
            .map(|&(t, o)| {
                (
                    t,
                    WaitEdge {
                        lock: u64::from(o) * 0x100,
                        owner: Some(o),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn a_chain_ends_at_a_thread_that_waits_for_no_lock() {
        let g = wait_graph(&edges(&[(1, 2), (2, 3)]));
        assert_eq!(g.chains[&1], [2, 3]);
        assert_eq!(g.chains[&2], [3]);
        assert!(g.deadlocks.is_empty());
    }

    #[test]
    fn abba_and_three_thread_deadlocks_are_named_once() {
        let g = wait_graph(&edges(&[
            (10, 11),
            (11, 10),
            (5, 7),
            (7, 6),
            (6, 5),
            (20, 10),
        ]));
        assert_eq!(g.deadlocks, [vec![5, 7, 6], vec![10, 11]]);
        assert_eq!(g.chains[&10], [11, 10]);
        // A thread outside a cycle waiting into it.
        assert_eq!(g.chains[&20], [10, 11, 10]);
    }

    #[test]
    fn unknown_owners_end_the_chain() {
        let mut w = edges(&[(1, 2)]);
        w.insert(
            2,
            WaitEdge {
                lock: 0x42,
                owner: None,
            },
        );
        let g = wait_graph(&w);
        assert_eq!(g.chains[&1], [2]);
        assert_eq!(g.chains[&2], Vec::<u32>::new());
    }

    #[test]
    fn a_thread_waiting_on_a_lock_it_holds_is_a_deadlock_of_one() {
        let g = wait_graph(&edges(&[(3, 3)]));
        assert_eq!(g.deadlocks, [vec![3]]);
    }
}
