//! A tokio program whose tasks (spawned with `librip::tokio::spawn_traced`)
//! get stuck the ways async code does, for the end-to-end tests.
//!
//! - `stuck RING`: on a runtime of three registered workers, a task awaits
//!   a channel nobody sends to; one holds a `tokio::sync::Mutex` guard
//!   across a long sleep while another waits to lock it; one sleeps; one
//!   blocks its worker thread inside its poll (a blocking call in async
//!   code). Prints `task <name> <id>` per task, then `ready` once every
//!   task is parked (idle, or the blocker polling), and runs until killed.
//! - `many RING N`: N tasks idle at the same await. Prints `ready` once
//!   all are parked.
//!
//! Each task snaps right before its await, on a line marked
//! `// SNAP: <label>`: the tests read this file to know the line.

use std::{
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use librip::{
    Ring, RingOptions,
    reader::{RingFile, SlotKind, SlotState},
    snap,
    tokio::TracedExt,
};
use tokio::sync::{Mutex, mpsc};

const HOUR: Duration = Duration::from_secs(3600);

/// Awaits a message that never comes.
async fn wait_for_message(mut rx: mpsc::Receiver<u32>) {
    snap!(); // SNAP: wait_for_message
    let _ = rx.recv().await;
}

/// Holds the lock across an await that takes an hour.
async fn hold_lock(m: Arc<Mutex<u32>>) {
    let _guard = m.lock().await;
    snap!(); // SNAP: hold_lock
    tokio::time::sleep(HOUR).await;
}

/// Waits for the lock `hold_lock` holds.
async fn wait_for_lock(m: Arc<Mutex<u32>>) {
    snap!(); // SNAP: wait_for_lock
    let _guard = m.lock().await;
}

/// Sleeps for an hour.
async fn nap() {
    snap!(); // SNAP: nap
    tokio::time::sleep(HOUR).await;
}

/// Blocks its worker thread inside its poll (the bug rip-probe shows as
/// a task polling on a thread that sleeps in the kernel).
async fn block_thread() {
    snap!(); // SNAP: block_thread
    std::thread::sleep(HOUR);
}

/// One of many connections, idle.
async fn read_frame() {
    snap!(); // SNAP: read_frame
    std::future::pending::<()>().await;
}

fn runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_time()
        .thread_name("tokio-worker")
        .on_thread_start(|| {
            librip::register_thread("tokio-worker").expect("a slot for a worker");
        })
        .build()
        .expect("a tokio runtime")
}

/// Spawns `fut` as task `name` and prints its id.
fn spawn<F>(name: &str, fut: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let fut = fut.traced(name);
    println!("task {name} {}", fut.id().expect("a coroutine slot"));
    tokio::spawn(fut);
}

/// Waits until `want` live tasks are parked: polled at least once and idle,
/// except `polling` of them, polling.
fn wait_parked(ring: &str, want: usize, polling: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = RingFile::open(ring.as_ref()).expect("read my own ring");
        let (mut idle, mut busy) = (0, 0);
        for s in r.slots() {
            let (SlotKind::Coroutine, SlotState::Live, Some(t)) = (s.kind, s.state, s.task) else {
                continue;
            };
            match (t.polls, t.polling_tid) {
                (0, _) => {}
                (_, 0) => idle += 1,
                _ => busy += 1,
            }
        }
        if idle + busy == want && busy == polling {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{idle} idle and {busy} polling tasks of {want}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn create(ring: &str, tasks: u32) {
    let opts = RingOptions {
        thread_slots: 64,
        coroutine_slots: tasks + 16,
        depth: 32,
    };
    if let Err(e) = Ring::create(ring, opts) {
        eprintln!("rip-tokio-workload: {e}");
        std::process::exit(1);
    }
    librip::register_thread("main").expect("a slot for main");
}

fn stuck(ring: &str) {
    create(ring, 16);
    let rt = runtime(3);
    let (tx, rx) = mpsc::channel::<u32>(1);
    let lock = Arc::new(Mutex::new(0));
    rt.block_on(async {
        spawn("channel-waiter", wait_for_message(rx));
        spawn("lock-holder", hold_lock(lock.clone()));
        spawn("sleeper", nap());
        spawn("blocker", block_thread());
    });
    // The holder has the lock before the waiter asks for it.
    wait_parked(ring, 4, 1);
    rt.block_on(async { spawn("lock-waiter", wait_for_lock(lock.clone())) });
    wait_parked(ring, 5, 1);
    println!("ready");
    let _never_sent = tx;
    rt.block_on(std::future::pending::<()>());
}

fn many(ring: &str, n: u32) {
    create(ring, n);
    let rt = runtime(2);
    rt.block_on(async {
        for _ in 0..n {
            librip::tokio::spawn_traced("conn", read_frame());
        }
    });
    wait_parked(ring, n as usize, 0);
    println!("ready");
    rt.block_on(std::future::pending::<()>());
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["stuck", ring] => stuck(ring),
        ["many", ring, n] => many(ring, n.parse().expect("N")),
        _ => {
            eprintln!("usage: rip-tokio-workload stuck RING | many RING N");
            std::process::exit(2);
        }
    }
}
