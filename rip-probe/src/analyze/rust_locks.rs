//! Locks that record no owner, recognised by evidence: a futex whose word
//! fits no glibc layout is a Rust `std::sync` or parking_lot lock when the
//! waiting thread's own stack is in that lock's slow path. The waiter's
//! user stack is unwound (framehop, the binaries' CFI, its memory read
//! without stopping it) from the registers `/proc/PID/task/TID/syscall`
//! gives, and named with blazesym.

use crate::{collect::stacks::Stacks, model::Owner, symbolize::stacks::StackSymbolizer};

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

/// Frames looked at from the top of the waiter's stack: the slow path is
/// a few calls above the futex syscall.
const FRAMES: usize = 12;

/// Lazily made unwinder and symbolizer of one process, for the waiters
/// that need them.
pub(crate) struct Evidence {
    pid: u32,
    tools: Option<Option<(Stacks, StackSymbolizer)>>,
}

impl Evidence {
    /// For process `pid`; nothing is read until a waiter is looked at.
    pub(crate) fn new(pid: u32) -> Self {
        Evidence { pid, tools: None }
    }

    /// The owner to report for thread `tid`, blocked in a futex wait that
    /// fits no glibc lock: "not recorded" with the lock type when its
    /// stack is in a Rust lock's slow path, else `None`.
    pub(crate) fn no_owner_lock(&mut self, tid: u32) -> Option<Owner> {
        let regs = crate::collect::procfs::syscall_regs(self.pid, tid)?;
        let pid = self.pid;
        let (stacks, names) = self
            .tools
            .get_or_insert_with(|| Some((Stacks::new(pid).ok()?, StackSymbolizer::new(pid))))
            .as_mut()?;
        let mut addrs = stacks.unwind(&regs);
        addrs.truncate(FRAMES);
        let frames = names.frames(&addrs);
        let functions = frames.iter().flat_map(|f| {
            f.function
                .as_deref()
                .into_iter()
                .chain(f.inlined.iter().map(|i| i.function.as_str()))
        });
        lock_type(functions).map(|ty| Owner::NotRecorded {
            reason: format!(
                "a {ty} (its waiter is in the lock's slow path): this lock type records no owner"
            ),
        })
    }
}

/// The lock type whose slow path one of `functions` is.
fn lock_type<'a>(functions: impl IntoIterator<Item = &'a str>) -> Option<&'static str> {
    functions.into_iter().find_map(|f| {
        // Rust's v0 mangling demangles methods as `<path::Type>::method`.
        let f = f.replace(['<', '>'], "");
        SLOW_PATHS
            .iter()
            .find(|(parts, _)| parts.iter().all(|p| f.contains(p)))
            .map(|(_, ty)| *ty)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_paths_name_their_lock_type() {
        let std_mutex = [
            "syscall",
            "std::sys::pal::unix::futex::futex_wait",
            "<std::sys::sync::mutex::futex::Mutex>::lock_contended",
            "std::sync::poison::mutex::Mutex<T>::lock",
        ];
        assert_eq!(lock_type(std_mutex), Some("Rust std::sync::Mutex"));
        assert_eq!(
            lock_type(["<std::sys::sync::rwlock::futex::RwLock>::write_contended"]),
            Some("Rust std::sync::RwLock")
        );
        assert_eq!(
            lock_type(["std::sys::unix::locks::futex_mutex::Mutex::lock_contended"]),
            Some("Rust std::sync::Mutex")
        );
        assert_eq!(
            lock_type(["parking_lot::raw_mutex::RawMutex::lock_slow"]),
            Some("parking_lot Mutex")
        );
        // A pthread mutex, or a lock of no known type: no evidence.
        assert_eq!(lock_type(["__lll_lock_wait", "pthread_mutex_lock"]), None);
        assert_eq!(lock_type(["my_lock::Mutex::lock_contended"]), None);
    }

    #[test]
    fn registers_come_from_the_syscall_file() {
        let me = std::process::id();
        let (tx, rx) = std::sync::mpsc::channel();
        let (_keep, hold) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let _ = hold.recv();
        });
        let tid = rx.recv().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let regs = loop {
            match crate::collect::procfs::syscall_regs(me, tid) {
                Some(r) if r.syscall_nr == libc::SYS_futex => break r,
                _ if std::time::Instant::now() > deadline => panic!("tid {tid} never waited"),
                _ => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        };
        assert!(regs.ip != 0 && regs.sp != 0, "{regs:?}");
        // A thread that does not exist has none.
        assert!(crate::collect::procfs::syscall_regs(me, 0x7fff_fff0).is_none());
    }
}
