//! The lock a thread blocked in a futex wait is waiting for, and who holds
//! it, read from the target's memory while it runs.
//!
//! The futex operation and the words around the futex address say what the
//! lock is; glibc's lock layouts (x86-64, stable since glibc 2.25) say
//! where its owner is recorded:
//!
//! | lock | futex the waiter sleeps on | owner |
//! | --- | --- | --- |
//! | `pthread_mutex_t` normal, recursive, error-check, adaptive, PP | `__lock` (+0), FUTEX_WAIT, value 2 (PP: ceiling bits \| 2) | `__owner` (+8) |
//! | robust `pthread_mutex_t` | `__lock`, FUTEX_WAIT, value `tid \| FUTEX_WAITERS` | `__lock & FUTEX_TID_MASK`, `__owner` |
//! | PI `pthread_mutex_t`, any PI futex | the futex word, FUTEX_LOCK_PI(2) | `word & FUTEX_TID_MASK` |
//! | `pthread_rwlock_t` | `__wrphase_futex` (+8, readers) or `__writers_futex` (+12, writers), FUTEX_WAIT_BITSET | `__cur_writer` (+24) |
//! | `pthread_cond_t` | `__g_signals[g]` (+40 / +44), FUTEX_WAIT_BITSET | none: a condition variable has no owner |
//! | `pthread_join` | the joined thread's `struct pthread.tid` (+720 from the descriptor, whose `header.self`, +16, points to itself), FUTEX_WAIT, value its tid | the joined thread, which the kernel wakes the joiner for when it exits |
//!
//! Nothing is claimed without validation: a field must hold a value its
//! lock type can hold, and an owner must be a thread. Anything else is
//! "owner unknown" with the reason. Locks that record no owner (Rust's std
//! and parking_lot locks, condition variables, a read-locked rwlock) say so
//! instead of guessing.

use std::{collections::HashMap, io};

use serde::Serialize;

use super::{
    memory::{Memory, ProcessMemory},
    namespaces::TidMap,
};
use crate::model::{LockKind, MutexFlavor, Owner};
use rip_ebpf::futex_ops::{
    self, FUTEX_LOCK_PI, FUTEX_LOCK_PI2, FUTEX_WAIT, FUTEX_WAIT_BITSET, FUTEX_WAIT_REQUEUE_PI,
};

/// `futex(2)`.
pub(crate) const SYS_FUTEX: i64 = libc::SYS_futex;
/// `futex_waitv(2)` (5.16).
pub(crate) const SYS_FUTEX_WAITV: i64 = libc::SYS_futex_waitv;

const FUTEX_OWNER_DIED: u32 = libc::FUTEX_OWNER_DIED;
const FUTEX_TID_MASK: u32 = libc::FUTEX_TID_MASK;

/// glibc's `__kind` bits.
const KIND_TYPE_MASK: u32 = 3;
const KIND_ROBUST: u32 = 16;
const KIND_PI: u32 = 32;
const KIND_PP: u32 = 64;
const KIND_PSHARED: u32 = 128;
/// Lock elision bits (`PTHREAD_MUTEX_ELISION_NP`, `…_NO_ELISION_NP`).
const KIND_ELISION: u32 = 256 | 512;
const KIND_KNOWN: u32 =
    KIND_TYPE_MASK | KIND_ROBUST | KIND_PI | KIND_PP | KIND_PSHARED | KIND_ELISION;
/// `__owner` of a robust mutex whose owner died and that was unlocked
/// without `pthread_mutex_consistent`.
const OWNER_NOTRECOVERABLE: u32 = 0x7fff_fffe;

/// glibc rwlock `__readers` bits.
const RWLOCK_WRPHASE: u32 = 1;
const RWLOCK_WRLOCKED: u32 = 2;
const RWLOCK_READER_SHIFT: u32 = 3;

/// Largest value Linux gives a thread id (`PID_MAX_LIMIT`, 2²²).
const PID_MAX_LIMIT: u32 = 1 << 22;

/// glibc's thread descriptor (`struct pthread`, what `pthread_self()`
/// returns) on x86-64: `header.self` points to the descriptor itself
/// (what tells one from other memory), and `tid` is the kernel's thread
/// id, which the kernel clears when the thread exits and wakes its joiner
/// on (the same offsets from glibc 2.26 to 2.41, Debian 10 to 13).
pub(crate) const PTHREAD_SELF: u64 = 16;
pub(crate) const PTHREAD_TID: u64 = 720;

/// A glibc `__kind` read as a mutex flavour, or `None` when it holds
/// bits no mutex has.
fn flavor_of(k: u32) -> Option<MutexFlavor> {
    if k & !KIND_KNOWN != 0 || (k & KIND_PI != 0 && k & KIND_PP != 0) {
        return None;
    }
    Some(MutexFlavor {
        kind: ["normal", "recursive", "errorcheck", "adaptive"][(k & KIND_TYPE_MASK) as usize],
        robust: k & KIND_ROBUST != 0,
        pi: k & KIND_PI != 0,
        pp: k & KIND_PP != 0,
        pshared: k & KIND_PSHARED != 0,
    })
}

/// What a thread id recorded in a lock is now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TidStatus {
    /// A live thread of the target.
    Ours,
    /// A live thread of process `.0`.
    Other(u32),
    /// No such thread.
    Gone,
}

/// The lock a blocked thread waits for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AwaitedLock {
    /// Address of the lock (the mutex, rwlock or condition variable; the
    /// futex word otherwise).
    pub addr: u64,
    /// Address of the futex word the thread sleeps on.
    pub futex: u64,
    /// What it is.
    pub kind: LockKind,
    /// For a mutex, its flavour.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mutex: Option<MutexFlavor>,
    /// Who holds it.
    pub owner: Owner,
}

/// The lock a thread blocked in syscall `nr` with arguments `args` waits
/// for, or `None` when the syscall is no futex wait. `tid_status` says
/// what a thread id found in memory is now.
pub fn awaited_lock(
    mem: &dyn Memory,
    tid_status: &dyn Fn(u32) -> TidStatus,
    nr: i64,
    args: &[u64; 6],
) -> Option<AwaitedLock> {
    match nr {
        SYS_FUTEX => futex_wait(mem, tid_status, args),
        SYS_FUTEX_WAITV => Some(waitv(mem, tid_status, args)),
        _ => None,
    }
}

fn futex_wait(
    mem: &dyn Memory,
    tid_status: &dyn Fn(u32) -> TidStatus,
    args: &[u64; 6],
) -> Option<AwaitedLock> {
    let uaddr = args[0];
    let cmd = futex_ops::cmd(args[1] as u32);
    let val = args[2] as u32;
    // A thread found in another futex call (a wake, FUTEX_TRYLOCK_PI) is
    // about to return: it waits for nothing.
    if !futex_ops::is_wait(cmd) {
        return None;
    }
    let lock = match cmd {
        FUTEX_LOCK_PI | FUTEX_LOCK_PI2 => pi_lock(mem, tid_status, uaddr),
        FUTEX_WAIT | FUTEX_WAIT_BITSET => plain_wait(mem, tid_status, uaddr, val),
        FUTEX_WAIT_REQUEUE_PI => AwaitedLock {
            addr: uaddr,
            futex: uaddr,
            kind: LockKind::Condvar,
            mutex: None,
            owner: Owner::NotRecorded {
                reason:
                    "a condition variable has no owner (it waits to be requeued to the PI mutex at \
                         its second address)"
                        .into(),
            },
        },
        _ => return None,
    };
    Some(lock)
}

/// futex_waitv: the first futex of the vector (`struct futex_waitv {u64
/// val; u64 uaddr; u32 flags; u32 reserved}`), read from the target.
fn waitv(mem: &dyn Memory, tid_status: &dyn Fn(u32) -> TidStatus, args: &[u64; 6]) -> AwaitedLock {
    let vec = args[0];
    let n = args[1];
    let first = mem
        .read_u64(vec)
        .and_then(|val| Ok((val, mem.read_u64(vec.wrapping_add(8))?)));
    match first {
        Ok((val, uaddr)) if n >= 1 => {
            let mut lock = plain_wait(mem, tid_status, uaddr, val as u32);
            if n > 1
                && let Owner::Unknown { reason } = &mut lock.owner
            {
                reason.push_str(&format!(" (first of {n} futexes)"));
            }
            lock
        }
        Ok(_) => unknown(vec, vec, "futex_waitv with no futex".into()),
        Err(e) => unknown(vec, vec, format!("cannot read the futex_waitv vector: {e}")),
    }
}

fn unknown(addr: u64, futex: u64, reason: String) -> AwaitedLock {
    AwaitedLock {
        addr,
        futex,
        kind: LockKind::Futex,
        mutex: None,
        owner: Owner::Unknown { reason },
    }
}

/// A thread id read from memory, judged: garbage, a thread of ours, of
/// another process, or gone.
fn owner_of(tid: u32, robust: bool, tid_status: &dyn Fn(u32) -> TidStatus) -> Owner {
    if tid == 0 || tid >= PID_MAX_LIMIT {
        return Owner::Unknown {
            reason: format!("the owner field holds {tid:#x}, which is no thread id"),
        };
    }
    match tid_status(tid) {
        TidStatus::Ours => Owner::Thread { tid },
        TidStatus::Other(pid) => Owner::OtherProcess { tid, pid },
        TidStatus::Gone => Owner::Exited { tid, robust },
    }
}

fn read_err(addr: u64, e: io::Error) -> String {
    format!("cannot read the lock at {addr:#x}: {e}")
}

/// FUTEX_LOCK_PI: the futex word holds the owner's tid. A glibc PI mutex
/// around it gives its flavour.
fn pi_lock(mem: &dyn Memory, tid_status: &dyn Fn(u32) -> TidStatus, uaddr: u64) -> AwaitedLock {
    let word = match mem.read_u32(uaddr) {
        Ok(w) => w,
        Err(e) => return unknown(uaddr, uaddr, read_err(uaddr, e)),
    };
    let flavor = mem
        .read_u32(uaddr.wrapping_add(16))
        .ok()
        .and_then(flavor_of)
        .filter(|f| f.pi);
    let robust = flavor.as_ref().is_some_and(|f| f.robust);
    let tid = word & FUTEX_TID_MASK;
    let owner = if tid == 0 {
        Owner::Unknown {
            reason: "the PI futex is free now (its owner just released it)".into(),
        }
    } else if word & FUTEX_OWNER_DIED != 0 {
        Owner::Exited { tid, robust: true }
    } else {
        owner_of(tid, robust, tid_status)
    };
    AwaitedLock {
        addr: uaddr,
        futex: uaddr,
        kind: if flavor.is_some() {
            LockKind::Mutex
        } else {
            LockKind::PiFutex
        },
        mutex: flavor,
        owner,
    }
}

/// FUTEX_WAIT / FUTEX_WAIT_BITSET on a word that held `val`: a glibc
/// mutex, condition variable or rwlock, in that order of evidence.
fn plain_wait(
    mem: &dyn Memory,
    tid_status: &dyn Fn(u32) -> TidStatus,
    uaddr: u64,
    val: u32,
) -> AwaitedLock {
    // The futex word itself must be readable; the neighbourhood is read
    // as far as it is mapped.
    let word = match mem.read_u32(uaddr) {
        Ok(w) => w,
        Err(e) => return unknown(uaddr, uaddr, read_err(uaddr, e)),
    };
    if let Some(j) = as_join(mem, tid_status, uaddr, word, val) {
        return j;
    }
    if let Some(m) = as_mutex(mem, tid_status, uaddr, val) {
        return m;
    }
    if let Some(c) = as_condvar(mem, uaddr) {
        return c;
    }
    if let Some(r) = as_rwlock(mem, tid_status, uaddr) {
        return r;
    }
    unknown(
        uaddr,
        uaddr,
        format!(
            "the futex at {uaddr:#x} (value {val:#x}) fits no glibc mutex, rwlock or condition \
             variable: another lock type, which may record no owner"
        ),
    )
}

/// `pthread_join` (and what calls it: `thrd_join`, Rust's
/// `JoinHandle::join`): the futex is the `tid` field of a live thread's
/// glibc descriptor (the descriptor `PTHREAD_TID` below it points to
/// itself) and holds (`word`, as read) that thread's id, which the waiter
/// passed. The
/// kernel clears the field and wakes the joiner when the thread exits: it
/// waits for that thread to exit, its "owner".
fn as_join(
    mem: &dyn Memory,
    tid_status: &dyn Fn(u32) -> TidStatus,
    uaddr: u64,
    word: u32,
    val: u32,
) -> Option<AwaitedLock> {
    let pd = uaddr.checked_sub(PTHREAD_TID)?;
    if word != val
        || val == 0
        || mem.read_u64(pd.wrapping_add(PTHREAD_SELF)).ok()? != pd
        || val >= PID_MAX_LIMIT
        || tid_status(val) != TidStatus::Ours
    {
        return None;
    }
    Some(AwaitedLock {
        addr: uaddr,
        futex: uaddr,
        kind: LockKind::ThreadExit,
        mutex: None,
        owner: Owner::Thread { tid: val },
    })
}

/// A glibc mutex whose `__lock` is the futex: the waiter passed 2
/// (contended), `tid | FUTEX_WAITERS` (robust) or PP ceiling bits | 2; the
/// `__kind` is valid; the owner field names a thread.
fn as_mutex(
    mem: &dyn Memory,
    tid_status: &dyn Fn(u32) -> TidStatus,
    uaddr: u64,
    val: u32,
) -> Option<AwaitedLock> {
    let lock = mem.read_u32(uaddr).ok()?;
    let owner_field = mem.read_u32(uaddr.wrapping_add(8)).ok()?;
    let flavor = flavor_of(mem.read_u32(uaddr.wrapping_add(16)).ok()?)?;
    if flavor.pi {
        return None;
    }
    let (fits, owner) = if flavor.robust {
        // The lock word is the owner's tid (with FUTEX_WAITERS, and
        // FUTEX_OWNER_DIED once the kernel saw it exit).
        let tid = lock & FUTEX_TID_MASK;
        let fits = val & FUTEX_TID_MASK == tid && tid != 0;
        let owner = if lock & FUTEX_OWNER_DIED != 0 || owner_field == OWNER_NOTRECOVERABLE {
            Owner::Exited { tid, robust: true }
        } else {
            owner_of(tid, true, tid_status)
        };
        (fits, owner)
    } else if flavor.pp {
        (val & 3 == 2, owner_of(owner_field, false, tid_status))
    } else {
        (
            val == 2 && lock != 0,
            owner_of(owner_field, false, tid_status),
        )
    };
    if !fits {
        return None;
    }
    // A non-mutex word that happens to hold 2 with a valid-looking kind
    // would name a nonsense owner: only a thread id makes it a mutex.
    if let Owner::Unknown { .. } = owner {
        return None;
    }
    Some(AwaitedLock {
        addr: uaddr,
        futex: uaddr,
        kind: LockKind::Mutex,
        mutex: Some(flavor),
        owner,
    })
}

/// A glibc condition variable: waiters sleep on `__g_signals[g]` (+40 or
/// +44), and `__wrefs` (+36) counts them (in units of 8), as does
/// `__g_refs[g]` (+16 + 4g, in units of 2).
fn as_condvar(mem: &dyn Memory, uaddr: u64) -> Option<AwaitedLock> {
    for g in 0..2u64 {
        let base = uaddr.checked_sub(40 + 4 * g)?;
        let wrefs = mem.read_u32(base + 36).ok()?;
        let grefs = mem.read_u32(base + 16 + 4 * g).ok()?;
        let waiters = wrefs >> 3;
        if (1..PID_MAX_LIMIT).contains(&waiters) && grefs >= 2 && grefs >> 1 <= waiters {
            return Some(AwaitedLock {
                addr: base,
                futex: uaddr,
                kind: LockKind::Condvar,
                mutex: None,
                owner: Owner::NotRecorded {
                    reason: "it has no owner: it waits to be signalled".into(),
                },
            });
        }
    }
    None
}

/// A glibc rwlock: readers wait on `__wrphase_futex` (+8) while a writer
/// holds it, and so does a writer waiting for readers to leave; writers
/// wait on `__writers_futex` (+12) for another writer; `__cur_writer` (+24) is
/// the writer's tid; `__flags` (+48) is a preference (0–2), `__shared`
/// (+28) 0 or 1, and the futex words hold 0–3.
fn as_rwlock(
    mem: &dyn Memory,
    tid_status: &dyn Fn(u32) -> TidStatus,
    uaddr: u64,
) -> Option<AwaitedLock> {
    for off in [8u64, 12] {
        let Some(base) = uaddr.checked_sub(off) else {
            continue;
        };
        let (Ok(readers), Ok(futex), Ok(writer), Ok(shared), Ok(flags)) = (
            mem.read_u32(base),
            mem.read_u32(uaddr),
            mem.read_u32(base + 24),
            mem.read_u32(base + 28),
            mem.read_u32(base + 48),
        ) else {
            continue;
        };
        if futex > 3 || shared > 1 || flags > 2 {
            continue;
        }
        // Write phase with the write lock taken: a writer holds it and
        // recorded itself. Read phase with readers registered: they hold it
        // (a writer waiting for them to leave has set WRLOCKED already).
        let write_phase = readers & RWLOCK_WRPHASE != 0;
        let owner = if write_phase && readers & RWLOCK_WRLOCKED != 0 {
            owner_of(writer, false, tid_status)
        } else if !write_phase && readers >> RWLOCK_READER_SHIFT > 0 {
            Owner::Readers {
                count: readers >> RWLOCK_READER_SHIFT,
            }
        } else {
            continue;
        };
        if let Owner::Unknown { .. } = owner {
            continue;
        }
        return Some(AwaitedLock {
            addr: base,
            futex: uaddr,
            kind: LockKind::Rwlock,
            mutex: None,
            owner,
        });
    }
    None
}

/// How long [`lock_at`] keeps re-reading a mutex caught between its lock
/// word and its owner field: a holder preempted there on a busy machine is
/// off its CPU for a few scheduler slices.
const SETTLE_WITHIN: std::time::Duration = std::time::Duration::from_millis(100);
/// The pause between two of those reads.
const SETTLE_PAUSE: std::time::Duration = std::time::Duration::from_micros(250);

/// What the lock at futex word `uaddr` is, for a wait that is over (its
/// waiter used operation `op` and expected `val`): as [`awaited_lock`]
/// when the lock is still held, else a glibc mutex recognised at rest
/// (`__lock` 0–2 as the waiter's 2 implies, a valid `__kind`, an `__owner`
/// that is 0 when the lock is free). Owners are not asked for: the waits
/// are over. `None` when no layout fits.
///
/// glibc takes a mutex's lock word before it records the owner and clears
/// the owner before it releases the word: a mutex read in between is held
/// by nobody yet. Such a read says neither yes nor no, so the lock is read
/// again (for up to [`SETTLE_WITHIN`]) until it is at rest or held by a
/// thread; a hot mutex is otherwise reported as a bare futex on the read
/// that happened to fall there.
pub fn lock_at(
    mem: &dyn Memory,
    tid_status: &dyn Fn(u32) -> TidStatus,
    uaddr: u64,
    op: u32,
    val: u32,
) -> Option<(u64, LockKind, Option<MutexFlavor>)> {
    let start = std::time::Instant::now();
    loop {
        match lock_read(mem, tid_status, uaddr, op, val) {
            LockRead::Settled(found) => return found,
            LockRead::InTransition if start.elapsed() < SETTLE_WITHIN => {
                std::thread::sleep(SETTLE_PAUSE);
            }
            LockRead::InTransition => return None,
        }
    }
}

/// One read of [`lock_at`].
enum LockRead {
    /// The answer: the lock, or `None` when no layout fits.
    Settled(Option<(u64, LockKind, Option<MutexFlavor>)>),
    /// A normal mutex's word is taken and its owner is not recorded (yet,
    /// or no more).
    InTransition,
}

fn lock_read(
    mem: &dyn Memory,
    tid_status: &dyn Fn(u32) -> TidStatus,
    uaddr: u64,
    op: u32,
    val: u32,
) -> LockRead {
    let held = awaited_lock(
        mem,
        tid_status,
        SYS_FUTEX,
        &[uaddr, u64::from(op), u64::from(val), 0, 0, 0],
    );
    if let Some(l) = held.filter(|l| l.kind != LockKind::Futex) {
        return LockRead::Settled(Some((l.addr, l.kind, l.mutex)));
    }
    if !matches!(futex_ops::cmd(op), FUTEX_WAIT | FUTEX_WAIT_BITSET) || val != 2 {
        return LockRead::Settled(None);
    }
    let words = (|| {
        let lock = mem.read_u32(uaddr).ok()?;
        let owner = mem.read_u32(uaddr.wrapping_add(8)).ok()?;
        let flavor = flavor_of(mem.read_u32(uaddr.wrapping_add(16)).ok()?)?;
        (!flavor.pi && !flavor.robust && !flavor.pp).then_some((lock, owner, flavor))
    })();
    let Some((lock, owner, flavor)) = words else {
        return LockRead::Settled(None);
    };
    let taken = (1..=2).contains(&lock);
    if taken && owner == 0 {
        return LockRead::InTransition;
    }
    let at_rest = lock == 0 && owner == 0;
    let held_by_thread = taken && (1..PID_MAX_LIMIT).contains(&owner);
    LockRead::Settled((at_rest || held_by_thread).then_some((uaddr, LockKind::Mutex, Some(flavor))))
}

/// What thread `tid` is now, seen from process `pid`: one of its threads,
/// a thread of another process, or gone.
pub fn tid_status(pid: u32, tid: u32) -> TidStatus {
    if std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists() {
        return TidStatus::Ours;
    }
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).unwrap_or_default();
    let tgid = status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok());
    // /proc/TID resolves thread ids of other processes too.
    match tgid {
        Some(tgid) if tgid != pid => TidStatus::Other(tgid),
        _ => TidStatus::Gone,
    }
}

/// The futex wait a thread is in now, from `/proc/PID/task/TID/syscall`:
/// `Some((nr, uaddr))` in futex(2) or futex_waitv(2) (`uaddr`: its first
/// argument), `None` when it is in no futex wait (running, another
/// syscall, gone).
pub fn futex_wait_now(pid: u32, tid: u32) -> Option<(i64, u64)> {
    let text = crate::discover::read_proc(pid, tid, "syscall").ok()?;
    parse_futex_wait(&text)
}

/// [`futex_wait_now`] of thread `tid`, its `syscall` file opened below
/// `task_dir` (the process's `/proc/PID/task`); `name` is scratch space.
fn futex_wait_in(
    task_dir: &rustix::fd::OwnedFd,
    tid: u32,
    name: &mut String,
) -> Option<(i64, u64)> {
    use std::fmt::Write;
    name.clear();
    let _ = write!(name, "{tid}/syscall");
    let fd = rustix::fs::openat(
        task_dir,
        name.as_str(),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()?;
    // The line is a number and eight hexadecimal words: under 200 bytes.
    // Only its first two words are parsed.
    let mut buf = [0u8; 256];
    let n = rustix::io::read(&fd, &mut buf).ok()?;
    parse_futex_wait(std::str::from_utf8(&buf[..n]).ok()?)
}

/// [`futex_wait_now`] of one `syscall` file's text.
fn parse_futex_wait(text: &str) -> Option<(i64, u64)> {
    let mut words = text.split_whitespace();
    let nr: i64 = words.next()?.parse().ok()?;
    let uaddr = u64::from_str_radix(words.next()?.trim_start_matches("0x"), 16).ok()?;
    matches!(nr, SYS_FUTEX | SYS_FUTEX_WAITV).then_some((nr, uaddr))
}

/// One futex wait as the kernel snapshot gave it: the syscall and the
/// arguments that say what it waits for (the rest are 0). Threads waiting
/// on one lock share it.
pub type WaitKey = (i64, [u64; 6]);

/// The arguments a [`WaitKey`] keeps: futex(2)'s word, operation and
/// expected value; futex_waitv(2)'s vector and count. The lock is read
/// from these alone, so waits that differ only in their timeouts share
/// their reads.
pub const WAIT_KEY_ARGS: usize = 3;

/// The key of syscall `nr` with arguments `args`, when it is a futex wait.
pub fn wait_key(nr: i64, args: &[u64]) -> Option<WaitKey> {
    if !matches!(nr, SYS_FUTEX | SYS_FUTEX_WAITV) {
        return None;
    }
    let mut key = [0u64; 6];
    for (k, a) in key.iter_mut().zip(args).take(WAIT_KEY_ARGS) {
        *k = *a;
    }
    Some((nr, key))
}

/// The waits of `ev`'s first reads a cycle of waits can be made of: those
/// of the threads on a cycle of the graph in which each waiter points at
/// the owner its lock's first read names, when that owner was itself in a
/// futex wait. A cycle is a deadlock only if a second look finds it again,
/// so these are read again. Analyze claims an owner only where the first
/// read named it, so every cycle it can find is one of these: the
/// threads that merely queue behind a cycle (a pool behind a deadlocked
/// lock) are not read again.
pub fn chained(ev: &LockEvidence, waits: &[(u32, WaitKey)]) -> Vec<(u32, WaitKey)> {
    let owner_of: HashMap<u32, u32> = waits
        .iter()
        .filter_map(|(tid, key)| {
            let owner = ev.locks.get(key)?.as_ref()?.owner?;
            matches!(ev.now.get(&owner), Some(Some(_))).then_some((*tid, owner))
        })
        .collect();
    let on_cycle = on_cycles(&owner_of);
    waits
        .iter()
        .filter(|(tid, _)| on_cycle.contains(tid))
        .copied()
        .collect()
}

/// The nodes on a cycle of the graph `next` (each node points at no more
/// than one other), in time linear in its size: each walk stops at the
/// first node an earlier walk or itself has visited, and only a node
/// visited by the walk itself closes a cycle.
fn on_cycles(next: &HashMap<u32, u32>) -> std::collections::HashSet<u32> {
    let mut walk_of: HashMap<u32, usize> = HashMap::with_capacity(next.len());
    let mut out = std::collections::HashSet::new();
    for (walk, &start) in next.keys().enumerate() {
        let mut path = Vec::new();
        let mut at = start;
        loop {
            match walk_of.get(&at) {
                Some(&w) if w == walk => {
                    // Back at a node of this walk: the path from it on is
                    // a cycle.
                    let from = path.iter().position(|&t| t == at).unwrap_or(0);
                    out.extend(path[from..].iter().copied());
                    break;
                }
                Some(_) => break,
                None => {}
            }
            walk_of.insert(at, walk);
            path.push(at);
            match next.get(&at) {
                Some(&n) => at = n,
                None => break,
            }
        }
    }
    out
}

/// Where [`evidence`] learns, between a lock's two reads, the futex wait
/// each of the given threads is in (`None`: in none): [`proc_waits_now`],
/// or [`waits_in_tasks`] of a pass of the kernel's task iterator.
pub type WaitsNow<'a> = dyn FnMut(&[u32]) -> HashMap<u32, Option<(i64, u64)>> + 'a;

/// The futex wait each of `tids` is in now, from the kernel's task
/// iterator: `tasks` gives each thread's tid, whether it is blocked, its
/// system call and that call's first argument. A thread blocked in
/// futex(2) or futex_waitv(2) waits at that word; one that is not blocked
/// waits for nothing (a waiter woken and not yet run has ended its wait);
/// one the pass did not see is gone.
pub fn waits_in_tasks(
    tasks: impl IntoIterator<Item = (u32, bool, i64, u64)>,
    tids: &[u32],
) -> HashMap<u32, Option<(i64, u64)>> {
    let mut now: HashMap<u32, Option<(i64, u64)>> = tids.iter().map(|&t| (t, None)).collect();
    for (tid, blocked, nr, arg0) in tasks {
        if let Some(w) = now.get_mut(&tid) {
            *w = (blocked && matches!(nr, SYS_FUTEX | SYS_FUTEX_WAITV)).then_some((nr, arg0));
        }
    }
    now
}

/// [`futex_wait_now`] of each of `tids`. Thousands of waiters are
/// thousands of /proc reads, each its own system calls (and the kernel
/// waits for each thread to be off its CPU to read its registers): on two
/// threads when there are that many (the reads are independent; each
/// thread reads one half). From thousands on, [`waits_in_tasks`] of one
/// more iterator pass costs less.
pub fn proc_waits_now(pid: u32, tids: &[u32]) -> HashMap<u32, Option<(i64, u64)>> {
    /// Below this, a second thread costs more than it saves.
    const SPLIT_AT: usize = 2_000;
    // The task directory is opened once: each thread's file is then one
    // name below it, not a walk from /proc, and is read into a buffer on
    // the stack (no allocation per thread).
    let task_dir = rustix::fs::open(
        format!("/proc/{pid}/task"),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok();
    let read = |part: &[u32]| -> Vec<(u32, Option<(i64, u64)>)> {
        let mut name = String::with_capacity(32);
        part.iter()
            .map(|&t| {
                let now = match &task_dir {
                    Some(dir) => futex_wait_in(dir, t, &mut name),
                    None => futex_wait_now(pid, t),
                };
                (t, now)
            })
            .collect()
    };
    if tids.len() < SPLIT_AT {
        return read(tids).into_iter().collect();
    }
    let (a, b) = tids.split_at(tids.len() / 2);
    let (a, b) = std::thread::scope(|s| {
        let other = s.spawn(|| read(b));
        let mine = read(a);
        (mine, other.join().expect("a /proc reader does not panic"))
    });
    a.into_iter().chain(b).collect()
}

/// A lock read twice around the waiters' states.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockReads {
    /// The lock word and owner, read first.
    pub first: AwaitedLock,
    /// The same, read again after the waiters' and owners' states.
    pub second: AwaitedLock,
    /// The owner of the first read as rip-probe's pid namespace numbers
    /// it, when it is a live thread of the target.
    pub owner: Option<u32>,
}

/// The evidence the lock analysis works from, gathered in one step while
/// the target runs: each awaited lock read (word and owner), then the
/// futex wait each waiter and each owner is in, then each lock read
/// again. Ownership is claimed only where these agree (`analyze::waits`).
#[derive(Clone, Debug, Default)]
pub struct LockEvidence {
    /// Per distinct wait, its lock's two reads (`None`: no futex wait).
    pub locks: HashMap<WaitKey, Option<LockReads>>,
    /// The futex wait each waiter of a lock that names an owner, and each
    /// such owner, was in between the two reads (rip-probe's tids; `None`:
    /// in none).
    pub now: HashMap<u32, Option<(i64, u64)>>,
}

/// Reads the evidence for `waits` (each waiter's tid and its wait, as the
/// kernel snapshot gave them) from process `pid`. Each distinct wait is
/// read once per pass, whatever its number of waiters (a pool of 10,000
/// workers behind one mutex is two reads).
///
/// `now_of` says which wait each waiter of a lock that names an owner, and
/// each such owner, is in between the lock's two reads.
pub fn evidence(pid: u32, waits: &[(u32, WaitKey)], now_of: &mut WaitsNow<'_>) -> LockEvidence {
    let mem = ProcessMemory::new(pid);
    // A lock records its owner as the process's own pid namespace numbers
    // it (a container's): ours are needed to find the owner here.
    let ns = TidMap::of(pid);
    let host = |tid: u32| ns.as_ref().map_or(Some(tid), |m| m.host(u64::from(tid)));
    let status = |tid| match host(tid) {
        Some(tid) => tid_status(pid, tid),
        None => TidStatus::Gone,
    };
    let read = |(nr, args): &WaitKey| awaited_lock(&mem, &status, *nr, args);
    let mut first: HashMap<WaitKey, Option<AwaitedLock>> = HashMap::new();
    for (_, key) in waits {
        first.entry(*key).or_insert_with(|| read(key));
    }
    // Only a claimed owner needs its waiters' and its own state: a
    // condition variable's 10,000 waiters cost no read.
    let owned = |key: &WaitKey| {
        first
            .get(key)
            .and_then(Option::as_ref)
            .is_some_and(|l| l.owner.tid().is_some())
    };
    let owners = first
        .values()
        .flatten()
        .filter_map(|l| l.owner.tid().and_then(host));
    let waiters = waits.iter().filter(|(_, k)| owned(k)).map(|(t, _)| *t);
    let mut tids: Vec<u32> = waiters.chain(owners).collect();
    tids.sort_unstable();
    tids.dedup();
    let now = now_of(&tids);
    let locks = first
        .into_iter()
        .map(|(key, f)| {
            let reads = f.and_then(|first| {
                let second = read(&key)?;
                let owner = first.owner.tid().and_then(host);
                Some(LockReads {
                    first,
                    second,
                    owner,
                })
            });
            (key, reads)
        })
        .collect();
    LockEvidence { locks, now }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Memory made of 32-bit words at addresses; anything else unmapped.
    #[derive(Default)]
    struct Words(BTreeMap<u64, u32>);

    impl Words {
        fn at(mut self, addr: u64, words: &[u32]) -> Self {
            for (i, w) in words.iter().enumerate() {
                self.0.insert(addr + 4 * i as u64, *w);
            }
            self
        }
    }

    impl Memory for Words {
        fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
            for (i, chunk) in buf.chunks_mut(4).enumerate() {
                let w = self
                    .0
                    .get(&(addr + 4 * i as u64))
                    .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
                chunk.copy_from_slice(&w.to_le_bytes()[..chunk.len()]);
            }
            Ok(())
        }
    }

    const FUTEX_WAITERS: u32 = libc::FUTEX_WAITERS;
    const LIVE: u32 = 101;
    const OTHER: u32 = 202;
    fn status(tid: u32) -> TidStatus {
        match tid {
            LIVE => TidStatus::Ours,
            OTHER => TidStatus::Other(200),
            _ => TidStatus::Gone,
        }
    }
    fn wait(mem: &Words, op: u64, uaddr: u64, val: u64) -> AwaitedLock {
        awaited_lock(mem, &status, SYS_FUTEX, &[uaddr, op, val, 0, 0, 0]).unwrap()
    }
    /// A pthread_mutex_t at 0x1000: lock, count, owner, nusers, kind, spins.
    fn mutex(lock: u32, owner: u32, kind: u32) -> Words {
        Words::default().at(0x1000, &[lock, 0, owner, 1, kind, 0, 0, 0, 0, 0])
    }

    #[test]
    fn every_mutex_kind_names_its_owner() {
        for (kind, name) in [
            (0, "normal"),
            (1, "recursive"),
            (2, "errorcheck"),
            (3, "adaptive"),
        ] {
            let l = wait(&mutex(2, LIVE, kind), 128, 0x1000, 2);
            assert_eq!(l.kind, LockKind::Mutex);
            assert_eq!(l.mutex.as_ref().unwrap().kind, name);
            assert_eq!(l.owner, Owner::Thread { tid: LIVE });
        }
        // Robust (process-shared, as glibc makes them): the lock word is the tid.
        let l = wait(
            &mutex(LIVE | FUTEX_WAITERS, LIVE, 144),
            0,
            0x1000,
            (LIVE | FUTEX_WAITERS).into(),
        );
        assert!(l.mutex.as_ref().unwrap().robust);
        assert_eq!(l.owner, Owner::Thread { tid: LIVE });
        // PI and robust PI: FUTEX_LOCK_PI(_PRIVATE).
        for (op, kind) in [(134, 32), (6, 176)] {
            let l = wait(&mutex(LIVE | FUTEX_WAITERS, LIVE, kind), op, 0x1000, 0);
            assert_eq!(
                (l.kind, l.owner.clone()),
                (LockKind::Mutex, Owner::Thread { tid: LIVE })
            );
            assert!(l.mutex.unwrap().pi);
        }
        // PP: ceiling bits above the state.
        let l = wait(
            &mutex((5 << 19) | 2, LIVE, 64),
            128,
            0x1000,
            (5u64 << 19) | 2,
        );
        assert!(l.mutex.unwrap().pp);
        assert_eq!(l.owner, Owner::Thread { tid: LIVE });
    }

    #[test]
    fn owners_that_exited_or_live_elsewhere_are_said_so() {
        let l = wait(&mutex(2, 999, 0), 128, 0x1000, 2);
        assert_eq!(
            l.owner,
            Owner::Exited {
                tid: 999,
                robust: false
            }
        );
        let l = wait(&mutex(2, OTHER, 128), 0, 0x1000, 2);
        assert_eq!(
            l.owner,
            Owner::OtherProcess {
                tid: OTHER,
                pid: 200
            }
        );
        // Robust, after the kernel marked the owner dead.
        let w = 999 | FUTEX_WAITERS | FUTEX_OWNER_DIED;
        let l = wait(&mutex(w, 999, 144), 0, 0x1000, (999 | FUTEX_WAITERS).into());
        assert_eq!(
            l.owner,
            Owner::Exited {
                tid: 999,
                robust: true
            }
        );
        // A bare PI futex, not a mutex.
        let mem = Words::default().at(0x2000, &[LIVE | FUTEX_WAITERS]);
        let l = wait(&mem, 6, 0x2000, 0);
        assert_eq!(
            (l.kind, l.owner),
            (LockKind::PiFutex, Owner::Thread { tid: LIVE })
        );
    }

    #[test]
    fn a_join_waits_for_the_thread_whose_descriptor_holds_the_futex() {
        // LIVE's descriptor at 0x10000: header.self, and its tid field.
        let pd = 0x10000;
        let joined = |self_ptr: u64, tid: u32| {
            Words::default()
                .at(
                    pd + PTHREAD_SELF,
                    &[self_ptr as u32, (self_ptr >> 32) as u32],
                )
                .at(pd + PTHREAD_TID, &[tid, 0, 0, 0, 0, 0])
        };
        let l = wait(&joined(pd, LIVE), 0, pd + PTHREAD_TID, LIVE.into());
        assert_eq!(
            (l.kind, l.addr, l.owner),
            (
                LockKind::ThreadExit,
                pd + PTHREAD_TID,
                Owner::Thread { tid: LIVE }
            )
        );
        // No descriptor there, a thread of another process or gone, the
        // word not the value waited with: not a join.
        for (mem, val) in [
            (joined(pd + 8, LIVE), LIVE),
            (joined(pd, OTHER), OTHER),
            (joined(pd, 7), 7),
            (joined(pd, 0), LIVE),
        ] {
            let l = wait(&mem, 0, pd + PTHREAD_TID, val.into());
            assert_ne!(l.kind, LockKind::ThreadExit, "{l:?}");
            assert!(l.owner.tid().is_none(), "{l:?}");
        }
    }

    /// glibc's own descriptor, for real: a thread of this test process
    /// joining another that is blocked is found waiting for it to exit.
    #[test]
    fn a_thread_in_pthread_join_waits_for_the_thread_it_joins() {
        let pid = std::process::id();
        // A thread running `f`, and its id.
        fn spawn_with_tid(f: impl FnOnce() + Send + 'static) -> (std::thread::JoinHandle<()>, u32) {
            let (tx, rx) = std::sync::mpsc::channel();
            let t = std::thread::spawn(move || {
                tx.send(rustix::thread::gettid().as_raw_nonzero().get() as u32)
                    .unwrap();
                f();
            });
            (t, rx.recv().unwrap())
        }
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (joined, joined_tid) = spawn_with_tid(move || go_rx.recv().unwrap());
        let (joiner, joiner_tid) = spawn_with_tid(move || joined.join().unwrap());
        // Its futex wait's arguments, once it is in it.
        // (/proc's syscall file: the number in decimal, the arguments in
        // hex.)
        let started = std::time::Instant::now();
        let args = loop {
            let text = std::fs::read_to_string(format!("/proc/{pid}/task/{joiner_tid}/syscall"))
                .unwrap_or_default();
            let mut words = text.split_whitespace();
            let nr = words.next().and_then(|w| w.parse::<i64>().ok());
            let args: Vec<u64> = words
                .map(|w| u64::from_str_radix(w.trim_start_matches("0x"), 16).unwrap_or(u64::MAX))
                .collect();
            if nr == Some(SYS_FUTEX) && args.len() >= 6 {
                break [args[0], args[1], args[2], args[3], args[4], args[5]];
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "the joiner never slept in futex: /proc says {text:?}"
            );
            std::thread::yield_now();
        };
        let status = |t: u32| tid_status(pid, t);
        let l = awaited_lock(&ProcessMemory::new(pid), &status, SYS_FUTEX, &args).unwrap();
        go_tx.send(()).unwrap();
        joiner.join().unwrap();
        assert_eq!(
            (l.kind, l.owner),
            (LockKind::ThreadExit, Owner::Thread { tid: joined_tid })
        );
    }

    #[test]
    fn garbage_is_never_an_owner() {
        // An owner field that is no tid, a kind with unknown bits.
        for m in [mutex(2, 0xdead_beef, 0), mutex(2, LIVE, 0x4000)] {
            let l = wait(&m, 128, 0x1000, 2);
            assert_eq!(l.kind, LockKind::Futex, "{l:?}");
            assert!(matches!(l.owner, Owner::Unknown { .. }), "{l:?}");
        }
        // Unreadable.
        let l = wait(&Words::default(), 128, 0x1000, 2);
        assert!(matches!(&l.owner, Owner::Unknown { reason } if reason.contains("cannot read")));
    }

    #[test]
    fn condvars_have_no_owner_and_rwlocks_name_their_writer() {
        // pthread_cond_t at 0x3000, one waiter on __g_signals[0] (+40).
        let cv = Words::default().at(0x3000, &[2, 0, 0, 0, 2, 0, 0, 0, 0, 8, 0, 0]);
        let l = wait(&cv, 0x189, 0x3028, 0);
        assert_eq!((l.kind, l.addr), (LockKind::Condvar, 0x3000));
        assert!(matches!(l.owner, Owner::NotRecorded { .. }));
        // pthread_rwlock_t at 0x4000 write-locked by LIVE; a reader waits on +8,
        // a writer on +12.
        let rw = Words::default().at(0x4000, &[11, 0, 3, 1, 0, 0, LIVE, 0, 0, 0, 0, 0, 0, 0]);
        for futex in [0x4008, 0x400c] {
            let l = wait(&rw, 0x189, futex, 3);
            assert_eq!((l.kind, l.addr), (LockKind::Rwlock, 0x4000));
            assert_eq!(l.owner, Owner::Thread { tid: LIVE });
        }
        // Read-locked by two readers, a writer waiting for them to leave
        // (it has set WRLOCKED): no tid is recorded.
        let rw = Words::default().at(
            0x4000,
            &[(2 << 3) | 2, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        );
        let l = wait(&rw, 0x189, 0x4008, 2);
        assert_eq!(
            (l.kind, l.owner),
            (LockKind::Rwlock, Owner::Readers { count: 2 })
        );
    }

    #[test]
    fn a_lock_at_rest_is_still_recognised() {
        // A free normal mutex that a waiter waited on with 2.
        let free = mutex(0, 0, 0);
        let (addr, kind, flavor) = lock_at(&free, &status, 0x1000, 128, 2).unwrap();
        assert_eq!((addr, kind), (0x1000, LockKind::Mutex));
        assert_eq!(flavor.unwrap().kind, "normal");
        // Held again, with a live owner: as a waiter would see it.
        let held = mutex(2, LIVE, 3);
        let (_, kind, flavor) = lock_at(&held, &status, 0x1000, 128, 2).unwrap();
        assert_eq!((kind, flavor.unwrap().kind), (LockKind::Mutex, "adaptive"));
        // Garbage owner, unknown kind bits, an owner recorded in a free lock.
        for m in [
            mutex(0, 0xdead_beef, 0),
            mutex(0, 0, 0x4000),
            mutex(0, LIVE, 0),
        ] {
            assert_eq!(lock_at(&m, &status, 0x1000, 128, 2), None);
        }
        // A wait that did not pass 2 is no glibc mutex wait.
        assert_eq!(lock_at(&free, &status, 0x1000, 128, 0), None);
    }

    /// Memory that reads as `before` for its first `reads` reads, then as
    /// `after`: a lock that changes while it is read.
    struct Changing {
        before: Words,
        after: Words,
        reads: std::cell::Cell<u32>,
    }

    impl Memory for Changing {
        fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
            let left = self.reads.get();
            self.reads.set(left.saturating_sub(1));
            if left > 0 {
                self.before.read(addr, buf)
            } else {
                self.after.read(addr, buf)
            }
        }
    }

    #[test]
    fn a_mutex_caught_between_its_word_and_its_owner_is_read_again() {
        // Taken, owner not yet recorded (or cleared before the release):
        // read again, it is a mutex once its owner is there.
        let changing = Changing {
            before: mutex(2, 0, 0),
            after: mutex(2, LIVE, 0),
            reads: std::cell::Cell::new(12),
        };
        let (_, kind, flavor) = lock_at(&changing, &status, 0x1000, 128, 2).unwrap();
        assert_eq!((kind, flavor.unwrap().kind), (LockKind::Mutex, "normal"));
        assert_eq!(changing.reads.get(), 0, "read until it settled");
        // A word that stays taken with no owner is no mutex this reader can
        // vouch for: it gives up, within its bound.
        let start = std::time::Instant::now();
        assert_eq!(lock_at(&mutex(2, 0, 0), &status, 0x1000, 128, 2), None);
        assert!(start.elapsed() < SETTLE_WITHIN * 3, "{:?}", start.elapsed());
    }

    #[test]
    fn the_wait_a_thread_is_in_now_can_come_from_the_task_iterator() {
        let tasks = [
            // Blocked in futex(2) and futex_waitv(2): waiting there.
            (10, true, SYS_FUTEX, 0x1000),
            (11, true, SYS_FUTEX_WAITV, 0x2000),
            // Woken, in the call still, not run yet: its wait has ended.
            (12, false, SYS_FUTEX, 0x1000),
            // Blocked in another call.
            (13, true, libc::SYS_read, 3),
            // Not asked for.
            (14, true, SYS_FUTEX, 0x1000),
        ];
        let now = waits_in_tasks(tasks, &[10, 11, 12, 13, 15]);
        assert_eq!(
            now,
            HashMap::from([
                (10, Some((SYS_FUTEX, 0x1000))),
                (11, Some((SYS_FUTEX_WAITV, 0x2000))),
                (12, None),
                (13, None),
                // Not in the pass: gone.
                (15, None),
            ])
        );
    }

    #[test]
    fn the_wait_a_thread_is_in_now_comes_from_its_syscall_file() {
        assert_eq!(
            parse_futex_wait("202 0x55d0c0 0x80 0x2 0x0 0x0 0x0 0x7ffc 0x7f01\n"),
            Some((SYS_FUTEX, 0x55d0c0))
        );
        for other in [
            "running\n",
            "-1 0x7ffc 0x7f01\n",
            "0 0x3 0x7ffc 0x1 0x0 0x0 0x0 0x1 0x2\n",
            "",
        ] {
            assert_eq!(parse_futex_wait(other), None, "{other:?}");
        }
    }

    /// The reads of many waiters (below the task directory, on two
    /// threads from 2,000 on) say what the file of each says: a thread
    /// parked on a futex is in its wait at its word, one that is not (this
    /// one, reading) is in none.
    #[test]
    fn waits_read_below_the_task_directory_are_each_threads_file() {
        let pid = std::process::id();
        let me = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        let (tx, rx) = std::sync::mpsc::channel();
        let done = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let waiter = {
            let done = done.clone();
            std::thread::spawn(move || {
                tx.send(rustix::thread::gettid().as_raw_nonzero().get() as u32)
                    .unwrap();
                let (m, c) = &*done;
                let mut d = m.lock().unwrap();
                while !*d {
                    d = c.wait(d).unwrap();
                }
            })
        };
        let tid = rx.recv().unwrap();
        // Until the waiter is in its condition variable's futex wait.
        while futex_wait_now(pid, tid).is_none() {
            std::thread::yield_now();
        }
        let one = proc_waits_now(pid, &[tid, me]);
        assert!(one[&tid].is_some_and(|(nr, _)| nr == SYS_FUTEX), "{one:?}");
        assert_eq!(one[&me], None);
        // Past the split: the same thread many times over, on two threads.
        let many = vec![tid; 2_500];
        let read = proc_waits_now(pid, &many);
        assert_eq!(read.get(&tid), one.get(&tid));
        let (m, c) = &*done;
        *m.lock().unwrap() = true;
        c.notify_all();
        waiter.join().unwrap();
    }

    #[test]
    fn other_syscalls_and_ops_are_no_lock() {
        let m = mutex(2, LIVE, 0);
        assert!(awaited_lock(&m, &status, 0, &[0x1000, 128, 2, 0, 0, 0]).is_none());
        assert!(awaited_lock(&m, &status, SYS_FUTEX, &[0x1000, 1, 2, 0, 0, 0]).is_none());
    }

    #[test]
    fn only_the_waits_on_a_cycle_are_read_again() {
        // 1 and 2 wait for each other, 3 and 4 queue behind 1's lock, 5
        // waits for 6, which waits for nothing; 7 and 8 wait for each
        // other's locks but 8's owner was in no futex wait.
        let key = |a: u64| (SYS_FUTEX, [a, 128, 2, 0, 0, 0]);
        let held_by = |a: u64, tid: u32| {
            let l = AwaitedLock {
                addr: a,
                futex: a,
                kind: LockKind::Mutex,
                mutex: None,
                owner: Owner::Thread { tid },
            };
            Some(LockReads {
                first: l.clone(),
                second: l,
                owner: Some(tid),
            })
        };
        let waits = [
            (1, key(0xa)),
            (2, key(0xb)),
            (3, key(0xb)),
            (4, key(0xb)),
            (5, key(0xc)),
            (7, key(0xd)),
            (8, key(0xe)),
        ];
        let ev = LockEvidence {
            locks: HashMap::from([
                (key(0xa), held_by(0xa, 2)),
                (key(0xb), held_by(0xb, 1)),
                (key(0xc), held_by(0xc, 6)),
                (key(0xd), held_by(0xd, 8)),
                (key(0xe), held_by(0xe, 7)),
            ]),
            now: HashMap::from([
                (1, Some((SYS_FUTEX, 0xa))),
                (2, Some((SYS_FUTEX, 0xb))),
                (6, None),
                (7, None),
                (8, Some((SYS_FUTEX, 0xe))),
            ]),
        };
        let mut again = chained(&ev, &waits);
        again.sort_unstable();
        assert_eq!(again, vec![(1, key(0xa)), (2, key(0xb))]);
    }

    #[test]
    fn cycles_of_a_graph_are_found_whatever_the_walk_starts_from() {
        // 1 → 2 → 3 → 1, 4 → 2, 5 → 5, 6 → 7.
        let next = HashMap::from([(1, 2), (2, 3), (3, 1), (4, 2), (5, 5), (6, 7)]);
        let mut on = on_cycles(&next).into_iter().collect::<Vec<_>>();
        on.sort_unstable();
        assert_eq!(on, vec![1, 2, 3, 5]);
    }
}
