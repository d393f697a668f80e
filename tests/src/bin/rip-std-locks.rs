//! Threads blocked on Rust's own locks, which record no owner: one waits
//! for a `std::sync::Mutex` and one for a `std::sync::RwLock` (write),
//! both held by the main thread. Prints `holder <tid>`, `mutex-waiter
//! <tid>`, `rwlock-waiter <tid>`, `ready`, and holds them until stdin
//! closes.

use std::{
    io::{Read, Write},
    sync::{Mutex, RwLock, mpsc},
    thread,
};

static TABLE: Mutex<u64> = Mutex::new(0);
static CONFIG: RwLock<u64> = RwLock::new(0);

fn main() {
    let table = TABLE.lock().unwrap();
    let config = CONFIG.read().unwrap();
    let (tx, rx) = mpsc::channel();
    let mut waiters = Vec::new();
    for role in ["mutex-waiter", "rwlock-waiter"] {
        let tx = tx.clone();
        waiters.push(
            thread::Builder::new()
                .name(role.into())
                .spawn(move || {
                    tx.send((role, rip_tests::gettid())).unwrap();
                    if role == "mutex-waiter" {
                        *TABLE.lock().unwrap() += 1;
                    } else {
                        *CONFIG.write().unwrap() += 1;
                    }
                })
                .unwrap(),
        );
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "holder {}", rip_tests::gettid()).unwrap();
    for _ in 0..2 {
        let (role, tid) = rx.recv().unwrap();
        writeln!(out, "{role} {tid}").unwrap();
    }
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    drop(out);
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop((table, config));
    for w in waiters {
        w.join().unwrap();
    }
}
