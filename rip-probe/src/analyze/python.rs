//! Python threads: each thread's Python frames (read from the interpreter
//! at report time) put in place of the native `_PyEval_EvalFrameDefault`
//! frames that run them, as a debugger that knows CPython would show the
//! stack, and who holds the GIL. Computed from what collection read;
//! nothing here reads the process.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use crate::{
    analyze::waits::WaitEdge,
    collect::runtime::python::{
        GcState, GilState, PyFrame, PyThread, Snapshot,
        locks::{LockRead, LockType, LockWait, PyLock},
    },
    model::{
        Frame, LockChange, LockKind, Owner, Python, PythonLock, PythonThread, Report, RuntimeWait,
        WaitsFor,
    },
};

/// The native function that runs a run of Python frames.
pub(crate) const EVAL: &str = "_PyEval_EvalFrameDefault";

/// Sets each thread's [`PythonThread`] from `snap`, merges its Python
/// frames into its native stack where the two agree, and says who holds
/// the GIL.
pub(crate) fn merge(report: &mut Report, snap: &Snapshot) {
    let holder = match snap.gil {
        GilState::Held(tstate) => snap.threads.iter().find(|p| p.tstate == tstate),
        _ => None,
    };
    let collector = gc_thread(snap, holder);
    let mut gil_waiters = Vec::new();
    for t in &mut report.threads {
        let Some(p) = snap.threads.iter().find(|p| p.tid == t.tid) else {
            continue;
        };
        let holds_gil = holder.is_some_and(|h| h.tid == p.tid);
        let runs_gc = collector == Some(p.tid);
        // The holder waits for nothing of its own: a wait seen on it is
        // from before it took the GIL, and is not claimed.
        let gil_wait = gil_wait(t, snap).filter(|_| !holds_gil);
        if gil_wait.is_some() {
            gil_waiters.push(t.tid);
        }
        if let Some(name) = &p.name
            && t.name_source == "comm"
        {
            t.name = name.clone();
            t.name_source = "python";
        }
        let Some(py) = &p.frames else {
            t.python = Some(PythonThread {
                ident: p.ident,
                name: p.name.clone(),
                frames: Vec::new(),
                merged: false,
                note: Some("its Python frames changed at every read".into()),
                holds_gil,
                runs_gc,
                gil_wait,
                waits_on: None,
            });
            continue;
        };
        let frames: Vec<Frame> = py.iter().map(frame).collect();
        let (merged, note) = if t.frames.is_empty() {
            (false, None)
        } else if t.stack_samples.is_some() {
            (
                false,
                Some(
                    "it ran: its native stack is the window's hottest, its Python frames are \
                     from report time, so they are shown apart"
                        .into(),
                ),
            )
        } else {
            match merged(&t.frames, py, &frames) {
                Ok(m) => {
                    t.frames = m.into();
                    (true, None)
                }
                Err(e) => (false, Some(e)),
            }
        };
        t.python = Some(PythonThread {
            ident: p.ident,
            name: p.name.clone(),
            frames,
            merged,
            note,
            holds_gil,
            runs_gc,
            gil_wait,
            waits_on: None,
        });
    }
    gil_waiters.sort_unstable();
    report.python = Some(Python {
        version: snap.version.clone(),
        gil: match (snap.gil, holder) {
            (GilState::Held(_), Some(_)) => "held",
            (GilState::Free, _) => "free",
            _ => "changing",
        }
        .into(),
        gil_holder: holder.map(|p| p.tid),
        gil_waiters,
        gc: match snap.gc {
            GcState::Running => "running",
            GcState::Idle => "idle",
            GcState::Changing => "changing",
        }
        .into(),
        gc_thread: collector,
        locks: Vec::new(),
    });
}

/// The thread the cyclic GC runs on, when `snap` says it runs: a
/// collection holds the GIL from start to end and runs no bytecode, so
/// it is the GIL's `holder` when that thread held the GIL all the time
/// between the two reads that saw the collection, and its Python frames
/// held still while they were read. Otherwise none is claimed (a
/// finalizer the collection calls may run Python code, or give the GIL
/// up to another thread).
fn gc_thread(snap: &Snapshot, holder: Option<&PyThread>) -> Option<u64> {
    let h = holder?;
    (snap.gc == GcState::Running && snap.gil_kept && h.frames.is_some() && h.tid != 0)
        .then_some(h.tid)
}

/// Groups the threads waiting on `threading` objects by object (from
/// `snap.locks`, what collection read), says who holds each where the
/// object records it, and makes each waiter's [`WaitsFor`] say so. Run
/// after [`merge`] and after the futex waits were judged (their words
/// fit no glibc lock, or are a semaphore's that records no owner).
pub(crate) fn locks(report: &mut Report, snap: &Snapshot) {
    let tid_of: HashMap<u64, u64> = snap.threads.iter().map(|t| (t.ident, t.tid)).collect();
    let mut by_object: BTreeMap<u64, Vec<&LockWait>> = BTreeMap::new();
    for w in &snap.locks {
        by_object.entry(object_of(w)).or_default().push(w);
    }
    let mut out: Vec<PythonLock> = by_object
        .into_iter()
        .map(|(at, waits)| judge(at, &waits, &tid_of))
        .collect();
    out.sort_by(|a, b| {
        b.waiters
            .len()
            .cmp(&a.waiters.len())
            .then(a.object.cmp(&b.object))
    });
    let by_tid: HashMap<u64, &PythonLock> = out
        .iter()
        .flat_map(|l| l.waiters.iter().map(move |&t| (t, l)))
        .collect();
    for t in &mut report.threads {
        let Some(l) = by_tid.get(&t.tid) else {
            continue;
        };
        if let Some(p) = &mut t.python {
            p.waits_on = Some(l.object);
        }
        let Some(futex) = snap.locks.iter().find(|w| w.tid == t.tid).map(|w| w.futex) else {
            continue;
        };
        t.waits_for = Some(WaitsFor {
            lock: l.object,
            futex,
            symbol: Some(lock_words(l)),
            kind: LockKind::Runtime,
            mutex: None,
            runtime: Some(RuntimeWait::PythonLock),
            owner: l.owner.clone(),
            owner_tid: l.owner.tid(),
        });
    }
    if let Some(py) = &mut report.python {
        py.locks = out;
    }
}

/// The wait-graph edges of the Python lock waiters looked at again
/// (`snap.locks_again`, after [`locks`] judged them): a waiter keeps its
/// edge to its lock's owner only when it still slept on the same futex
/// and the lock, read once more, still names that owner as its first two
/// reads did; otherwise its edge has no owner, and a cycle through it is
/// no deadlock. What [`crate::analyze::waits::confirm`] compares with the
/// edges of the first look.
pub(crate) fn again(report: &Report, snap: &Snapshot) -> BTreeMap<u32, WaitEdge> {
    let tid_of: HashMap<u64, u64> = snap.threads.iter().map(|t| (t.ident, t.tid)).collect();
    let mut out = BTreeMap::new();
    for a in &snap.locks_again {
        let (Ok(tid), Some(wait)) = (
            u32::try_from(a.tid),
            snap.locks.iter().find(|w| w.tid == a.tid),
        ) else {
            continue;
        };
        let Some(w) = report
            .threads
            .iter()
            .find(|t| t.tid == a.tid)
            .and_then(|t| t.waits_for.as_ref())
            .filter(|w| w.runtime == Some(RuntimeWait::PythonLock))
        else {
            continue;
        };
        let first = wait.owned().and_then(|l| l.reads[0]);
        let owner = match (a.still_waiting, a.read, first) {
            (true, Some(r), Some(f)) if r == f && r.held => tid_of
                .get(&r.owner)
                .and_then(|&t| u32::try_from(t).ok())
                .filter(|&o| w.owner_tid == Some(o)),
            _ => None,
        };
        out.insert(
            tid,
            WaitEdge {
                lock: w.lock,
                owner,
            },
        );
    }
    out
}

/// `threading.RLock rlock at 0x7f…`: what a waiter waits on, in words.
pub(crate) fn lock_words(l: &PythonLock) -> String {
    match &l.name {
        Some(n) => format!("threading.{} {n} at {:#x}", l.kind, l.object),
        None => format!("threading.{} at {:#x}", l.kind, l.object),
    }
}

/// The object a thread waits on: the `threading` object it waits
/// through, else the lock itself.
fn object_of(w: &LockWait) -> u64 {
    w.through.as_ref().map_or(w.lock.addr, |t| t.addr)
}

/// One object's waiters, and who holds it as far as its reads agree.
fn judge(at: u64, waits: &[&LockWait], tid_of: &HashMap<u64, u64>) -> PythonLock {
    let first = waits[0];
    let mut waiters: Vec<u64> = waits.iter().map(|w| w.tid).collect();
    waiters.sort_unstable();
    let name = waits.iter().find_map(|w| w.name.clone());
    let not_recorded = |reason: &str| Owner::NotRecorded {
        reason: reason.into(),
    };
    // Every read of the lock that says who holds it, by every waiter:
    // they must all agree.
    let agreed = |lock: &dyn Fn(&LockWait) -> Option<&PyLock>| -> Result<LockRead, Owner> {
        let mut reads = waits
            .iter()
            .filter_map(|w| lock(w))
            .flat_map(|l| l.reads.iter());
        let one = reads.next().copied().flatten();
        let Some(one) = one else {
            return Err(Owner::Unknown {
                reason: "its state could not be read".into(),
            });
        };
        if reads.all(|r| *r == Some(one)) {
            Ok(one)
        } else {
            Err(Owner::Changing {
                cause: LockChange::ReadsDisagree,
            })
        }
    };
    // An RLock's owner, from reads that agree.
    let rlock_owner = |read: LockRead, free: Owner| -> (Owner, Option<u64>) {
        if !read.held {
            return (free, None);
        }
        match tid_of.get(&read.owner) {
            // Its owner would not wait: it counts a relock. A stale read.
            Some(tid) if waiters.contains(tid) => (
                Owner::Changing {
                    cause: LockChange::OwnerWaitsForIt,
                },
                None,
            ),
            Some(&tid) => (
                Owner::Thread {
                    tid: u32::try_from(tid).unwrap_or(u32::MAX),
                },
                Some(read.count),
            ),
            None => (
                Owner::Unknown {
                    reason: format!(
                        "its owner's ident {:#x} is no thread state of the interpreter",
                        read.owner
                    ),
                },
                None,
            ),
        }
    };
    let (kind, held, owner, count) = match &first.through {
        None => match first.lock.kind {
            LockType::Lock => {
                let held = agreed(&|w| Some(&w.lock)).ok().map(|r| r.held);
                (
                    "Lock".to_string(),
                    held,
                    not_recorded("a threading.Lock records no owner"),
                    None,
                )
            }
            LockType::RLock => match agreed(&|w| Some(&w.lock)) {
                Ok(r) => {
                    let free = Owner::Unknown {
                        reason: "read free twice while threads wait on it: changing hands".into(),
                    };
                    let (owner, count) = rlock_owner(r, free);
                    ("RLock".to_string(), Some(r.held), owner, count)
                }
                Err(why) => ("RLock".to_string(), None, why, None),
            },
        },
        Some(t) if t.class == "Condition" => match &t.lock {
            Some(l) if l.kind == LockType::RLock => {
                match agreed(&|w| w.through.as_ref().and_then(|t| t.lock.as_ref())) {
                    Ok(r) => {
                        let free = not_recorded(
                            "its lock, an RLock, is free (read twice): its waiters wait to be notified",
                        );
                        let (owner, count) = rlock_owner(r, free);
                        (t.class.clone(), Some(r.held), owner, count)
                    }
                    Err(why) => (t.class.clone(), None, why, None),
                }
            }
            Some(_) => (
                t.class.clone(),
                None,
                not_recorded("its lock is a threading.Lock, which records no owner"),
                None,
            ),
            None => (
                t.class.clone(),
                None,
                Owner::Unknown {
                    reason: "its lock could not be read".into(),
                },
                None,
            ),
        },
        Some(t) => {
            let reason = if t.class.contains("Semaphore") {
                "a semaphore records no owner".to_string()
            } else {
                format!("a threading.{} records no owner", t.class)
            };
            (t.class.clone(), None, not_recorded(&reason), None)
        }
    };
    PythonLock {
        object: at,
        kind,
        name,
        waiters,
        held,
        owner,
        count,
    }
}

/// The function in which a thread waits to take the GIL (3.11–3.13).
const TAKE_GIL: &str = "take_gil";

/// Why thread `t` is said to wait for the GIL, when what was read says
/// it does: asleep in a futex wait on the GIL's condition variable or
/// mutex (what `take_gil` sleeps on; the kernel says where it sleeps), or
/// blocked with `take_gil` on its native stack (unwound while it was
/// blocked). A thread that ran, or sleeps elsewhere, is not claimed.
fn gil_wait(t: &crate::model::Thread, snap: &Snapshot) -> Option<String> {
    if t.state != crate::model::ThreadState::Sleeping {
        return None;
    }
    let futex = t
        .syscall
        .as_ref()
        .filter(|s| s.name == "futex")
        .and_then(|s| s.args.iter().find(|a| a.name == "uaddr"))
        .map(|a| a.raw);
    if let (Some(at), Some(gil)) = (futex, &snap.gil_waits)
        && gil.contains(&at)
    {
        return Some(format!(
            "asleep in futex_wait on {at:#x}, the GIL's condition variable or mutex"
        ));
    }
    if t.stack_samples.is_none()
        && t.frames
            .iter()
            .any(|f| f.function.as_deref() == Some(TAKE_GIL))
    {
        return Some(format!("blocked with {TAKE_GIL} on its native stack"));
    }
    None
}

/// The model's frame of a Python frame.
pub(crate) fn frame(p: &PyFrame) -> Frame {
    Frame {
        addr: p.code,
        function: p.function.clone(),
        file: p.file.clone(),
        line: p.line,
        python: true,
        ..Frame::default()
    }
}

/// `native` with each `_PyEval_EvalFrameDefault` frame replaced by the
/// run of Python frames it executes (innermost first both), or why not:
/// the counts must match, else the thread moved between the two reads.
pub(crate) fn merged(
    native: &Arc<[Frame]>,
    py: &[PyFrame],
    frames: &[Frame],
) -> Result<Vec<Frame>, String> {
    let evals = native
        .iter()
        .filter(|f| f.function.as_deref() == Some(EVAL))
        .count();
    let runs = py.iter().filter(|f| f.entry).count();
    if evals != runs {
        return Err(format!(
            "its native stack has {evals} {EVAL} frames for {runs} runs of Python frames: \
             it moved between the two reads, so they are shown apart"
        ));
    }
    let mut out = Vec::with_capacity(native.len() + frames.len());
    let mut next = 0;
    for f in native.iter() {
        if f.function.as_deref() == Some(EVAL) {
            // This run: up to and including the next entry frame.
            let end = py[next..]
                .iter()
                .position(|p| p.entry)
                .map_or(py.len(), |i| next + i + 1);
            out.extend_from_slice(&frames[next..end]);
            next = end;
        } else {
            out.push(f.clone());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        collect::runtime::python::locks::LockAgain,
        model::{Mode, ProcessInfo, StackTable, Thread, ThreadState},
    };

    fn native(name: &str) -> Frame {
        Frame {
            addr: 0x1000 + name.len() as u64,
            function: Some(name.into()),
            ..Frame::default()
        }
    }

    fn py(name: &str, line: u32, entry: bool) -> PyFrame {
        PyFrame {
            frame: 0x9000 + u64::from(line),
            code: 0x7000 + u64::from(line),
            function: Some(name.into()),
            file: Some("app.py".into()),
            line: Some(line),
            entry,
        }
    }

    fn report(frames: Vec<Frame>, py_frames: Option<Vec<PyFrame>>, gil: GilState) -> Report {
        report_with(frames, py_frames, gil, |_| {})
    }

    /// [`report`], with `change` made to the snapshot read first.
    fn report_with(
        frames: Vec<Frame>,
        py_frames: Option<Vec<PyFrame>>,
        gil: GilState,
        change: impl FnOnce(&mut Snapshot),
    ) -> Report {
        let mut r = Report {
            schema: crate::model::SCHEMA_VERSION,
            mode: Mode::Pid,
            process: ProcessInfo::default(),
            rings: Vec::new(),
            window_ns: 0,
            stacks: StackTable,
            threads: Vec::new(),
            tasks: Vec::new(),
            groups: Vec::new(),
            task_groups: Vec::new(),
            warnings: Vec::new(),
            deadlocks: Vec::new(),
            python: None,
        };
        let mut t = Thread::new(7, "python3".into(), "comm", ThreadState::Sleeping);
        t.frames = frames.into();
        r.threads.push(t);
        let mut snap = Snapshot {
            version: "3.11".into(),
            threads: vec![PyThread {
                tid: 7,
                ident: 99,
                tstate: 0x5000,
                frames: py_frames,
                name: Some("worker-1".into()),
            }],
            gil,
            gil_waits: None,
            gil_kept: true,
            gc: GcState::Idle,
            asyncio: None,
            locks: Vec::new(),
            locks_again: Vec::new(),
        };
        change(&mut snap);
        merge(&mut r, &snap);
        r
    }

    #[test]
    fn the_gc_runs_on_the_thread_that_held_the_gil_throughout_with_frames_that_held_still() {
        let frames = || Some(vec![py("collect_loop", 4, true)]);
        let gc = |kept: bool, gc: GcState, py: Option<Vec<PyFrame>>, gil: GilState| {
            let r = report_with(vec![], py, gil, |s| {
                s.gil_kept = kept;
                s.gc = gc;
            });
            let py = r.python.unwrap();
            let runs = r.threads[0].python.as_ref().unwrap().runs_gc;
            (py.gc, py.gc_thread, runs)
        };
        let held = GilState::Held(0x5000);
        assert_eq!(
            gc(true, GcState::Running, frames(), held),
            ("running".into(), Some(7), true)
        );
        // The GIL changed hands between the reads, its holder's frames
        // moved, or no thread held it both times: running, on no thread
        // claimed.
        for (kept, py, gil) in [
            (false, frames(), held),
            (true, None, held),
            (true, frames(), GilState::Changing),
            (true, frames(), GilState::Free),
        ] {
            assert_eq!(
                gc(kept, GcState::Running, py, gil),
                ("running".into(), None, false)
            );
        }
        // Seen by one read only, or by none: never claimed running.
        assert_eq!(
            gc(true, GcState::Changing, frames(), held),
            ("changing".into(), None, false)
        );
        assert_eq!(
            gc(true, GcState::Idle, frames(), held),
            ("idle".into(), None, false)
        );
    }

    fn names(frames: &[Frame]) -> Vec<&str> {
        frames
            .iter()
            .map(|f| f.function.as_deref().unwrap())
            .collect()
    }

    #[test]
    fn each_eval_frame_becomes_its_run_of_python_frames() {
        let r = report(
            vec![
                native("sem_wait"),
                native("lock_acquire"),
                native(EVAL),
                native("_PyFunction_Vectorcall"),
                native(EVAL),
                native("start_thread"),
            ],
            Some(vec![
                py("worker", 9, false),
                py("run", 3, true),
                py("Thread._bootstrap", 1, true),
            ]),
            GilState::Held(0x5000),
        );
        let t = &r.threads[0];
        assert_eq!(
            names(&t.frames),
            [
                "sem_wait",
                "lock_acquire",
                "worker",
                "run",
                "_PyFunction_Vectorcall",
                "Thread._bootstrap",
                "start_thread"
            ]
        );
        let p = t.python.as_ref().unwrap();
        assert!(p.merged && p.holds_gil && p.note.is_none());
        let py = r.python.unwrap();
        assert_eq!((py.gil.as_str(), py.gil_holder), ("held", Some(7)));
    }

    #[test]
    fn a_stack_that_does_not_match_is_left_alone_and_says_why() {
        let r = report(
            vec![native("sem_wait"), native(EVAL), native("start_thread")],
            Some(vec![
                py("worker", 9, true),
                py("Thread._bootstrap", 1, true),
            ]),
            GilState::Changing,
        );
        let t = &r.threads[0];
        assert_eq!(names(&t.frames), ["sem_wait", EVAL, "start_thread"]);
        let p = t.python.as_ref().unwrap();
        assert!(!p.merged && !p.holds_gil);
        assert!(
            p.note
                .as_ref()
                .unwrap()
                .contains("1 _PyEval_EvalFrameDefault frames for 2")
        );
        assert_eq!(names(&p.frames), ["worker", "Thread._bootstrap"]);
        let py = r.python.unwrap();
        assert_eq!((py.gil.as_str(), py.gil_holder), ("changing", None));
    }

    fn wait(tid: u64, lock: u64, kind: LockType, reads: [Option<LockRead>; 2]) -> LockWait {
        LockWait {
            tid,
            futex: 0x1000 + tid,
            lock: PyLock {
                addr: lock,
                kind,
                reads,
            },
            through: None,
            name: None,
        }
    }

    fn owned(owner: u64, count: u64) -> Option<LockRead> {
        Some(LockRead {
            held: owner != 0,
            owner,
            count,
        })
    }

    /// A report of threads 1–8 (ident 0x60 + tid) and the interpreter's
    /// read of them with `locks`, merged and judged.
    fn with_locks(locks_read: Vec<LockWait>) -> (Report, Snapshot) {
        let mut r = report(vec![], None, GilState::Free);
        r.threads.clear();
        for tid in 1..=8 {
            r.threads.push(Thread::new(
                tid,
                "python3".into(),
                "comm",
                ThreadState::Sleeping,
            ));
        }
        let threads = (1..=8)
            .map(|tid| PyThread {
                tid,
                ident: 0x60 + tid,
                tstate: 0x5000 + tid,
                frames: Some(Vec::new()),
                name: None,
            })
            .collect();
        let snap = Snapshot {
            version: "3.11".into(),
            threads,
            gil: GilState::Free,
            gil_waits: None,
            gil_kept: true,
            gc: GcState::Idle,
            asyncio: None,
            locks: locks_read,
            locks_again: Vec::new(),
        };
        merge(&mut r, &snap);
        locks(&mut r, &snap);
        (r, snap)
    }

    /// Threads: 1-3 wait on a Lock, 4 and 5 on an RLock owned by 6 (ident
    /// 0x66), 7 on an RLock whose two reads disagree, 8 on an RLock that
    /// names itself as owner.
    fn lock_report() -> Report {
        let held = Some(LockRead {
            held: true,
            owner: 0,
            count: 0,
        });
        with_locks(vec![
            wait(1, 0xa0, LockType::Lock, [held, held]),
            wait(2, 0xa0, LockType::Lock, [held, held]),
            wait(3, 0xa0, LockType::Lock, [held, held]),
            wait(4, 0xb0, LockType::RLock, [owned(0x66, 2), owned(0x66, 2)]),
            wait(5, 0xb0, LockType::RLock, [owned(0x66, 2), owned(0x66, 2)]),
            wait(7, 0xc0, LockType::RLock, [owned(0x66, 1), owned(0x65, 1)]),
            wait(8, 0xd0, LockType::RLock, [owned(0x68, 1), owned(0x68, 1)]),
        ])
        .0
    }

    /// Two threads each holding the RLock the other waits for, a third
    /// queued behind one of them; then the second look (`again`: each
    /// waiter's (still waiting, the lock's owner read once more)), and
    /// what the wait graph confirms.
    fn rlock_cycle(again_of: &[(u64, bool, u64)]) -> Report {
        let (mut r, mut snap) = with_locks(vec![
            wait(1, 0xa0, LockType::RLock, [owned(0x62, 1), owned(0x62, 1)]),
            wait(2, 0xb0, LockType::RLock, [owned(0x61, 1), owned(0x61, 1)]),
            wait(3, 0xa0, LockType::RLock, [owned(0x62, 1), owned(0x62, 1)]),
        ]);
        // The waits before the second look: a cycle of 1 and 2, 3 on its
        // way into it.
        assert_eq!(crate::analyze::waits::cycles(&r), [vec![1, 2]]);
        let t3 = r.threads.iter().find(|t| t.tid == 3).unwrap();
        assert_eq!(t3.waits_for.as_ref().unwrap().owner_tid, Some(2));
        snap.locks_again = again_of
            .iter()
            .map(|&(tid, still, owner)| LockAgain {
                tid,
                still_waiting: still,
                read: owned(owner, 1),
            })
            .collect();
        let runtime = again(&r, &snap);
        let cycles = crate::analyze::waits::cycles(&r);
        crate::analyze::waits::confirm(
            &mut r,
            &cycles,
            &crate::collect::locks::LockEvidence::default(),
            &runtime,
        );
        r
    }

    #[test]
    fn a_cycle_of_rlock_owners_is_a_deadlock_when_the_second_look_finds_it_again() {
        let r = rlock_cycle(&[(1, true, 0x62), (2, true, 0x61)]);
        assert_eq!(r.deadlocks, [vec![1, 2]]);
        let t1 = r.threads.iter().find(|t| t.tid == 1).unwrap();
        let w = t1.waits_for.as_ref().unwrap();
        assert_eq!((w.lock, w.owner_tid), (0xa0, Some(2)));
        // Gone on the second look: the other's RLock released, a waiter
        // no longer in its wait, or no second look at all.
        for again_of in [
            &[(1, true, 0x62), (2, true, 0)][..],
            &[(1, false, 0x62), (2, true, 0x61)][..],
            &[(1, true, 0x62)][..],
            &[][..],
        ] {
            let r = rlock_cycle(again_of);
            assert!(r.deadlocks.is_empty(), "{again_of:?}");
            for tid in [1, 2] {
                let t = r.threads.iter().find(|t| t.tid == tid).unwrap();
                let w = t.waits_for.as_ref().unwrap();
                assert_eq!(
                    (&w.owner, w.owner_tid),
                    (
                        &Owner::Changing {
                            cause: LockChange::CycleGone
                        },
                        None
                    ),
                    "{again_of:?}"
                );
            }
        }
    }

    #[test]
    fn waiters_are_grouped_by_object_and_an_rlock_owner_needs_reads_that_agree() {
        let r = lock_report();
        let py = r.python.as_ref().unwrap();
        let by = |o: u64| py.locks.iter().find(|l| l.object == o).unwrap();
        // Most waiters first.
        assert_eq!(py.locks[0].object, 0xa0);
        let a = by(0xa0);
        assert_eq!((a.kind.as_str(), &a.waiters[..]), ("Lock", &[1, 2, 3][..]));
        assert_eq!(a.held, Some(true));
        assert!(
            matches!(&a.owner, Owner::NotRecorded { reason } if reason.contains("records no owner"))
        );
        let b = by(0xb0);
        assert_eq!((&b.waiters[..], b.count), (&[4, 5][..], Some(2)));
        assert_eq!(b.owner, Owner::Thread { tid: 6 });
        assert_eq!(
            by(0xc0).owner,
            Owner::Changing {
                cause: LockChange::ReadsDisagree
            }
        );
        // An RLock's owner never waits for it: a stale read.
        assert_eq!(
            by(0xd0).owner,
            Owner::Changing {
                cause: LockChange::OwnerWaitsForIt
            }
        );
        // Each waiter's wait names the object and its owner.
        let t4 = r.threads.iter().find(|t| t.tid == 4).unwrap();
        let w = t4.waits_for.as_ref().unwrap();
        assert_eq!((w.lock, w.owner_tid), (0xb0, Some(6)));
        assert_eq!(w.runtime, Some(RuntimeWait::PythonLock));
        assert_eq!(t4.python.as_ref().unwrap().waits_on, Some(0xb0));
        let t6 = r.threads.iter().find(|t| t.tid == 6).unwrap();
        assert!(t6.waits_for.is_none());
    }

    #[test]
    fn frames_that_never_held_still_are_not_shown() {
        let r = report(vec![native(EVAL)], None, GilState::Free);
        let p = r.threads[0].python.as_ref().unwrap();
        assert!(p.frames.is_empty() && !p.merged);
        assert_eq!(r.python.unwrap().gil, "free");
    }
}
