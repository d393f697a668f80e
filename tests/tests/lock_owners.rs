//! The lock each blocked thread waits for and its owner, read from the
//! memory of a live process with real glibc locks of every kind (no BPF:
//! the syscall and its arguments come from /proc, as the kernel reports
//! them to rip-probe's task iterator too).

use std::{
    collections::HashMap,
    process::Command,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rip_probe::{
    collect::{
        locks::{AwaitedLock, awaited_lock, tid_status},
        memory::ProcessMemory,
    },
    model::{LockKind, Owner},
};
use rip_tests::{Workload, build_c, gettid};

/// `/proc/PID/task/TID/syscall` once the thread sleeps in futex(2): the
/// number and the six arguments.
fn futex_args(pid: u32, tid: u32) -> (i64, [u64; 6]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s =
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).unwrap_or_default();
        let w: Vec<&str> = s.split_whitespace().collect();
        if w.first() == Some(&"202") && w.len() >= 7 {
            let mut args = [0u64; 6];
            for (a, v) in args.iter_mut().zip(&w[1..7]) {
                *a = u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap();
            }
            return (202, args);
        }
        assert!(
            Instant::now() < deadline,
            "tid {tid} never slept in futex: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn lock_of(pid: u32, tid: u32) -> AwaitedLock {
    let (nr, args) = futex_args(pid, tid);
    awaited_lock(&ProcessMemory::new(pid), &|t| tid_status(pid, t), nr, &args)
        .unwrap_or_else(|| panic!("tid {tid}: futex(2) {args:x?} is a wait"))
}

#[test]
fn every_glibc_lock_kind_names_its_owner_or_says_why_not() {
    let w = Workload::start(Command::new(build_c("lock_kinds", &[])));
    let pid = w.pid();
    let holder = w.tid("holder");
    let waits: HashMap<&str, (u32, u64, Option<u32>)> = w
        .lines
        .iter()
        .filter_map(|l| {
            let f: Vec<&str> = l.strip_prefix("wait ")?.split(' ').collect();
            let addr = u64::from_str_radix(f[2].trim_start_matches("0x"), 16).ok()?;
            Some((f[0], (f[1].parse().ok()?, addr, f[3].parse().ok())))
        })
        .collect();
    assert_eq!(waits.len(), 12, "{:?}", w.lines);
    for (name, &(tid, addr, owner)) in &waits {
        let l = lock_of(pid, tid);
        eprintln!(
            "{name:>15} tid {tid}: {:?} at {:#x}, {:?}, owner {:?}",
            l.kind, l.addr, l.mutex, l.owner
        );
        assert_eq!(l.addr, addr, "{name}: the lock's address");
        match *name {
            "normal" | "recursive" | "errorcheck" | "adaptive" | "robust" | "pi" | "robust_pi" => {
                assert_eq!(l.kind, LockKind::Mutex, "{name}");
                let f = l.mutex.as_ref().unwrap();
                let kind = if ["robust", "pi", "robust_pi"].contains(name) {
                    "normal"
                } else {
                    name
                };
                assert_eq!(f.kind, kind, "{name}");
                assert_eq!(f.robust, name.starts_with("robust"), "{name}");
                assert_eq!(f.pi, name.ends_with("pi"), "{name}");
                assert_eq!(l.owner, Owner::Thread { tid: holder }, "{name}");
                assert_eq!(owner, Some(holder));
            }
            "exited" => {
                assert_eq!(l.kind, LockKind::Mutex);
                let gone = owner.unwrap();
                assert_ne!(gone, holder);
                assert_eq!(
                    l.owner,
                    Owner::Exited {
                        tid: gone,
                        robust: false
                    }
                );
            }
            "rwlock_reader" | "rwlock_writer" => {
                assert_eq!(l.kind, LockKind::Rwlock, "{name}");
                assert_eq!(l.owner, Owner::Thread { tid: holder }, "{name}");
            }
            "rwlock_readers" => {
                assert_eq!(l.kind, LockKind::Rwlock);
                assert_eq!(l.owner, Owner::Readers { count: 1 });
            }
            "condvar" => {
                assert_eq!(l.kind, LockKind::Condvar);
                assert!(
                    matches!(l.owner, Owner::NotRecorded { .. }),
                    "{:?}",
                    l.owner
                );
            }
            other => panic!("unexpected waiter {other}"),
        }
    }
}

/// Rust's std Mutex records no owner: the futex is not taken for a glibc
/// lock and no owner is invented.
#[test]
fn a_std_mutex_gets_no_invented_owner() {
    let m = Arc::new(Mutex::new(0u32));
    let guard = m.lock().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let m2 = Arc::clone(&m);
    let t = std::thread::spawn(move || {
        tx.send(gettid()).unwrap();
        *m2.lock().unwrap() += 1;
    });
    let tid = rx.recv().unwrap();
    let l = lock_of(std::process::id(), tid);
    eprintln!("std Mutex: {l:?}");
    assert_eq!(l.kind, LockKind::Futex);
    assert!(
        matches!(&l.owner, Owner::Unknown { reason } if reason.contains("may record no owner")),
        "{:?}",
        l.owner
    );
    drop(guard);
    t.join().unwrap();
}
