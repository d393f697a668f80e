//! The `threading` locks Python threads sleep on, read from outside: for
//! each thread the kernel says is in a futex wait, the `_thread.lock` or
//! `_thread.RLock` object whose own futex it is, the `threading` object it
//! waits through (a `Condition`, a `Semaphore`, an `Event`: the `self` of
//! the `threading.py` frames it waits in), and what those objects record,
//! read twice.
//!
//! How a lock's futex is found, by version: in 3.11 and 3.12 (and for an
//! `RLock` in 3.13) a lock is a `sem_t` of its own (`lock_lock`), so every
//! waiter of one lock sleeps on that word; the object is found among what
//! the waiting frame holds (its locals and value stack, where the callee
//! and its `self` are kept during the call, then its globals), and is the
//! one whose `lock_lock` is the futex. In 3.13 a `threading.Lock` is a
//! `PyMutex`: each waiter parks in `_PyParkingLot_Park` on a semaphore of
//! its own, inside a `wait_entry` on its stack that records the address
//! it parks for (`wait_entry.addr`, the mutex inside the lock object).
//! The object is taken only when its type's name says it is a lock.

use std::collections::HashMap;

use super::{PyFrame, PyThread, objects::Heap};
use crate::collect::memory::Memory;

/// `lockobject.lock_lock` and `rlockobject.rlock_lock` (a `sem_t *` in
/// 3.11 and 3.12, and the `RLock`'s in 3.13); 3.13's `lockobject.lock`
/// (a `PyMutex`) is there too.
const LOCK_WORD: u64 = 16;
/// `lockobject.locked` (3.11, 3.12: a byte).
const LOCK_LOCKED: u64 = 32;
/// `rlockobject.rlock_owner` (the owner's `pthread_self()`) and
/// `.rlock_count`.
const RLOCK_OWNER: u64 = 24;
const RLOCK_COUNT: u64 = 32;
/// 3.13's `struct wait_entry` (Python/parking_lot.c): `park_arg`, then
/// `addr` (what the thread parks for), then `sema`, the semaphore whose
/// futex the thread sleeps on.
const WAIT_ENTRY_ADDR: u64 = 8;
const WAIT_ENTRY_SEMA: u64 = 16;
/// Words of a waiting frame's locals and value stack looked through.
const FRAME_WORDS: usize = 64;
/// `PyCFunctionObject.m_self`: a bound builtin method's object (`with
/// lock:` calls the lock's `__enter__`, bound).
const CFUNCTION_SELF: u64 = 24;
/// The `threading.py` methods a thread waits in, innermost first: the
/// `self` of the outermost of them is the object it waits on.
const WAITS_THROUGH: &[&str] = &[
    "Condition.wait",
    "Condition.wait_for",
    "Condition.__enter__",
    "Semaphore.acquire",
    "BoundedSemaphore.acquire",
    "Event.wait",
    "Barrier.wait",
    "Barrier._wait",
    "Barrier._enter",
];

/// Which of `_thread`'s locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LockType {
    /// `_thread.lock` (`threading.Lock`): records no owner.
    Lock,
    /// `_thread.RLock` (`threading.RLock`): records its owner's ident
    /// and its recursion count.
    RLock,
}

/// One read of a lock's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LockRead {
    /// Locked (a `Lock`), or owned (an `RLock`: a non-zero owner).
    pub(crate) held: bool,
    /// An `RLock`'s owner (`pthread_self()` of the thread that holds it;
    /// 0 when free).
    pub(crate) owner: u64,
    /// An `RLock`'s recursion count.
    pub(crate) count: u64,
}

/// A `_thread` lock object and two reads of its state (`None`: a read
/// failed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PyLock {
    /// The object's address.
    pub(crate) addr: u64,
    pub(crate) kind: LockType,
    pub(crate) reads: [Option<LockRead>; 2],
}

/// The `threading` object a thread waits through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Through {
    /// Its address (`self` of its method).
    pub(crate) addr: u64,
    /// Its class's name (`Condition`, `Semaphore`, …).
    pub(crate) class: String,
    /// The lock it is built on (`Condition._lock`), when it is a
    /// `Condition` (or the `Condition` of a `Semaphore`, whose lock is a
    /// plain `Lock`).
    pub(crate) lock: Option<PyLock>,
}

/// What one Python thread asleep in a futex wait waits on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LockWait {
    /// The waiter's tid.
    pub(crate) tid: u64,
    /// The futex the kernel says it sleeps on.
    pub(crate) futex: u64,
    /// The lock whose futex that is.
    pub(crate) lock: PyLock,
    /// The `threading` object it waits through, when it waits in one of
    /// [`WAITS_THROUGH`].
    pub(crate) through: Option<Through>,
    /// The global name of the object waited on, in the module of the
    /// frame that waits on it, when one names it.
    pub(crate) name: Option<String>,
}

/// One wait of a possible cycle, looked at again a moment after it was
/// read: what a deadlock through Python locks is confirmed by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LockAgain {
    /// The waiter's tid.
    pub(crate) tid: u64,
    /// It was still asleep in a futex wait on the same word.
    pub(crate) still_waiting: bool,
    /// The lock whose owner its wait names ([`LockWait::owned`]), read
    /// once more (`None`: the read failed).
    pub(crate) read: Option<LockRead>,
}

impl LockWait {
    /// The lock whose owner this wait is judged by: the `_thread` lock it
    /// sleeps on, or the lock of the `threading` object it waits through
    /// (a `Condition`'s), when that is an `RLock`, the one lock that
    /// records its owner.
    pub(crate) fn owned(&self) -> Option<&PyLock> {
        let lock = match &self.through {
            None => Some(&self.lock),
            Some(t) => t.lock.as_ref(),
        };
        lock.filter(|l| l.kind == LockType::RLock)
    }
}

/// The waits of `waits` a cycle of waits could run through: those whose
/// `RLock` both reads name as held by a thread that is itself asleep on a
/// futex (`futex`: tid → the futex it sleeps on; `threads` give each
/// owner's tid by its ident).
pub(crate) fn chained<'a>(
    waits: &'a [LockWait],
    threads: &[PyThread],
    futex: &HashMap<u64, u64>,
) -> Vec<&'a LockWait> {
    let tid_of: HashMap<u64, u64> = threads.iter().map(|t| (t.ident, t.tid)).collect();
    waits
        .iter()
        .filter(|w| {
            let Some([Some(a), Some(b)]) = w.owned().map(|l| l.reads) else {
                return false;
            };
            a == b
                && a.held
                && tid_of
                    .get(&a.owner)
                    .is_some_and(|tid| futex.contains_key(tid))
        })
        .collect()
}

/// The second look at `waits` (from [`chained`]): each lock its owner is
/// judged by read once more, and each waiter's futex wait now, from
/// `now_of` (tid → the syscall and first argument it is in, `None` when
/// it is in none).
pub(super) fn again<M: Memory>(
    heap: &mut Heap<'_, M>,
    version: &str,
    waits: &[&LockWait],
    now_of: &mut crate::collect::locks::WaitsNow<'_>,
) -> Vec<LockAgain> {
    let Some(v) = Version::of(version) else {
        return Vec::new();
    };
    let tids: Vec<u32> = waits
        .iter()
        .filter_map(|w| u32::try_from(w.tid).ok())
        .collect();
    let now = now_of(&tids);
    waits
        .iter()
        .map(|w| {
            let still = u32::try_from(w.tid)
                .ok()
                .and_then(|t| now.get(&t).copied().flatten())
                == Some((crate::collect::locks::SYS_FUTEX, w.futex));
            LockAgain {
                tid: w.tid,
                still_waiting: still,
                read: w.owned().and_then(|l| state(heap, v, l.addr, l.kind)),
            }
        })
        .collect()
}

/// The locks the threads of `threads` asleep on a futex (`futex`: tid →
/// the futex address the kernel says) wait on; each lock's state read
/// once here and once more after all of them (`version` is
/// `major.minor`).
pub(super) fn read<M: Memory>(
    heap: &mut Heap<'_, M>,
    version: &str,
    threads: &[PyThread],
    futex: &HashMap<u64, u64>,
) -> Vec<LockWait> {
    let Some(v) = Version::of(version) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    // The first look (which object each waiter waits on, and its state)
    // through one copy of each page it reads: the waiters' frames name
    // the same locks and types over and over. The second read of each
    // state, after all the first, is read from the process again.
    heap.pass(true);
    for t in threads {
        let (Some(&at), Some(frames)) = (futex.get(&t.tid), &t.frames) else {
            continue;
        };
        let Some(first) = frames.first() else {
            continue;
        };
        let Some((addr, kind)) = lock_of(heap, v, first, at) else {
            continue;
        };
        let mut through = through(heap, frames);
        if let Some(l) = through.as_mut().and_then(|t| t.lock.as_mut()) {
            l.reads[0] = state(heap, v, l.addr, l.kind);
        }
        // The frame the wait started in: the caller of the outermost
        // threading.py method, else the innermost frame.
        let caller = frames
            .iter()
            .position(|f| !is_threading_wait(f))
            .and_then(|i| frames.get(i));
        let object = through.as_ref().map_or(addr, |t| t.addr);
        let name = caller.and_then(|f| global_name(heap, v, f, object));
        out.push(LockWait {
            tid: t.tid,
            futex: at,
            lock: PyLock {
                addr,
                kind,
                reads: [state(heap, v, addr, kind), None],
            },
            through,
            name,
        });
    }
    // The second read of each, after all the first.
    heap.pass(false);
    for w in &mut out {
        w.lock.reads[1] = state(heap, v, w.lock.addr, w.lock.kind);
        if let Some(l) = w.through.as_mut().and_then(|t| t.lock.as_mut()) {
            l.reads[1] = state(heap, v, l.addr, l.kind);
        }
    }
    out
}

/// The lock layouts of the versions read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    /// 3.11: every lock a `sem_t` of its own.
    V3_11,
    /// 3.12: the same locks; frames laid out anew.
    V3_12,
    /// 3.13: a `Lock` is a `PyMutex`; an `RLock` still a `sem_t`.
    V3_13,
}

impl Version {
    fn of(version: &str) -> Option<Version> {
        match version {
            "3.11" => Some(Version::V3_11),
            "3.12" => Some(Version::V3_12),
            "3.13" => Some(Version::V3_13),
            _ => None,
        }
    }

    /// `_PyInterpreterFrame.f_globals`.
    fn frame_globals(self) -> u64 {
        match self {
            Version::V3_11 => 8,
            Version::V3_12 | Version::V3_13 => 24,
        }
    }
}

/// The lock object whose futex is `futex`, seen from `frame`, the
/// innermost frame of a thread asleep on it.
fn lock_of<M: Memory>(
    heap: &mut Heap<'_, M>,
    v: Version,
    frame: &PyFrame,
    futex: u64,
) -> Option<(u64, LockType)> {
    if v == Version::V3_13 {
        // A waiter parked for a PyMutex: its wait entry names the mutex.
        let entry = futex.checked_sub(WAIT_ENTRY_SEMA)?;
        let mutex = heap.word(entry.wrapping_add(WAIT_ENTRY_ADDR))?;
        let obj = mutex.checked_sub(LOCK_WORD)?;
        if lock_type(heap, obj) == Some(LockType::Lock) {
            return Some((obj, LockType::Lock));
        }
    }
    let words = frame_words(heap, frame);
    let mut candidates = words.clone();
    // Bound builtin methods (a lock's `acquire`, `__enter__`): their self.
    for &w in &words {
        if heap.type_name(w).as_deref() == Some("builtin_function_or_method")
            && let Some(s) = heap.word(w.wrapping_add(CFUNCTION_SELF))
        {
            candidates.push(s);
        }
    }
    let is_it = |heap: &mut Heap<'_, M>, obj: u64| -> Option<LockType> {
        let kind = lock_type(heap, obj)?;
        // A 3.13 Lock has no futex of its own: it was found above.
        if kind == LockType::Lock && v == Version::V3_13 {
            return None;
        }
        (heap.word(obj.wrapping_add(LOCK_WORD))? == futex).then_some(kind)
    };
    for c in candidates {
        if let Some(kind) = is_it(heap, c) {
            return Some((c, kind));
        }
    }
    None
}

/// The words of `frame`'s locals and value stack (its callee and
/// arguments while it calls), non-null and aligned.
fn frame_words<M: Memory>(heap: &mut Heap<'_, M>, frame: &PyFrame) -> Vec<u64> {
    let at = frame.frame + heap.o.objects.frame_localsplus;
    let mut buf = vec![0u8; FRAME_WORDS * 8];
    // A frame near the end of its data stack chunk: read less.
    let n = [FRAME_WORDS, FRAME_WORDS / 4, 4]
        .into_iter()
        .find(|&n| heap.read(at, &mut buf[..n * 8]).is_ok())
        .unwrap_or(0);
    buf[..n * 8]
        .chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
        .filter(|&w| w != 0 && w % 8 == 0)
        .collect()
}

/// Which `_thread` lock `obj` is, by its type's name.
fn lock_type<M: Memory>(heap: &mut Heap<'_, M>, obj: u64) -> Option<LockType> {
    match heap.type_name(obj)?.as_str() {
        "_thread.lock" => Some(LockType::Lock),
        "_thread.RLock" => Some(LockType::RLock),
        _ => None,
    }
}

/// One read of lock `addr`'s state.
fn state<M: Memory>(
    heap: &mut Heap<'_, M>,
    v: Version,
    addr: u64,
    kind: LockType,
) -> Option<LockRead> {
    match kind {
        LockType::Lock => {
            let at = match v {
                Version::V3_11 | Version::V3_12 => addr.wrapping_add(LOCK_LOCKED),
                // `PyMutex._bits`: bit 0 is locked.
                Version::V3_13 => addr.wrapping_add(LOCK_WORD),
            };
            let mut b = [0u8; 1];
            heap.mem.read(at, &mut b).ok()?;
            Some(LockRead {
                held: b[0] & 1 != 0,
                owner: 0,
                count: 0,
            })
        }
        LockType::RLock => {
            // Owner and count in one read, so that they are of one moment.
            let mut b = [0u8; (RLOCK_COUNT + 8 - RLOCK_OWNER) as usize];
            heap.mem.read(addr.wrapping_add(RLOCK_OWNER), &mut b).ok()?;
            let word = |at: u64| {
                let at = (at - RLOCK_OWNER) as usize;
                u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
            };
            let (owner, count) = (word(RLOCK_OWNER), word(RLOCK_COUNT));
            Some(LockRead {
                held: owner != 0,
                owner,
                count,
            })
        }
    }
}

/// Whether `f` is one of the `threading.py` methods of [`WAITS_THROUGH`].
fn is_threading_wait(f: &PyFrame) -> bool {
    f.file
        .as_deref()
        .is_some_and(|p| p.ends_with("threading.py"))
        && f.function
            .as_deref()
            .is_some_and(|n| WAITS_THROUGH.contains(&n))
}

/// The `threading` object a thread whose frames are `frames` waits
/// through: `self` (the first local) of the outermost of the innermost
/// run of [`WAITS_THROUGH`] methods, when its class says it is one.
fn through<M: Memory>(heap: &mut Heap<'_, M>, frames: &[PyFrame]) -> Option<Through> {
    let outermost = frames.iter().take_while(|f| is_threading_wait(f)).last()?;
    let obj = heap.word(outermost.frame + heap.o.objects.frame_localsplus)?;
    // Its class (a subclass of threading's keeps its own name).
    let class = heap.type_name(obj)?;
    // A Condition's lock, or a Semaphore's Condition's: only an RLock
    // records an owner, read with the waits' locks.
    let cond = match class.as_str() {
        "Condition" => Some(obj),
        _ => heap
            .attribute(obj, "_cond")
            .filter(|&c| heap.type_name(c).as_deref() == Some("Condition")),
    };
    let lock = cond
        .and_then(|c| heap.attribute(c, "_lock"))
        .and_then(|l| Some((l, lock_type(heap, l)?)))
        .map(|(addr, kind)| PyLock {
            addr,
            kind,
            reads: [None, None],
        });
    Some(Through {
        addr: obj,
        class,
        lock,
    })
}

/// The name `obj` has among the globals of `frame`'s module.
fn global_name<M: Memory>(
    heap: &mut Heap<'_, M>,
    v: Version,
    frame: &PyFrame,
    obj: u64,
) -> Option<String> {
    let globals = heap.word(frame.frame + v.frame_globals())?;
    let items = heap.dict_items(globals)?;
    let key = items.into_iter().find(|&(_, value)| value == obj)?.0;
    heap.string(key)
}
