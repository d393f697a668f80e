//! Threads blocked on Rust's own locks, which record no owner: one waits
//! for a `std::sync::Mutex` and one for a `std::sync::RwLock` (write),
//! both held by the main thread; and one parked (`thread::park`), which
//! waits for no lock. Prints `holder <tid>`, `mutex-waiter <tid>`,
//! `rwlock-waiter <tid>`, `parker <tid>`, `ready`, and holds them until
//! stdin closes.

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
    // Parked until the process ends: nobody unparks it.
    let parker_tx = tx.clone();
    thread::Builder::new()
        .name("parker".into())
        .spawn(move || {
            parker_tx.send(("parker", rip_tests::gettid())).unwrap();
            loop {
                thread::park();
            }
        })
        .unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(out, "holder {}", rip_tests::gettid()).unwrap();
    for _ in 0..3 {
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
