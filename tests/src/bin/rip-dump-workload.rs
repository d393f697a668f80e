//! A librip program for the `rip-probe dump` tests.
//!
//! - `sites RING`: threads snap at known functions and lines (the lines
//!   marked `// SNAP: <label>`), in a known order; one thread exits; a few
//!   coroutines snap inside. Prints `role <name> <tid>` lines, `ready`, and
//!   waits to be killed.
//! - `many RING THREADS TASKS`: THREADS live threads and TASKS live
//!   coroutines, each having snapped at one of a few sites. Prints `ready`
//!   and waits to be killed.

use std::{
    io::Write,
    sync::{Arc, Barrier, mpsc},
    thread,
    time::Duration,
};

use librip::{Ring, RingOptions, coroutine::Coroutine, snap};

#[inline(never)]
fn parse_request() {
    snap!(); // SNAP: parse_request
}

#[inline(never)]
fn query_db() {
    snap!(); // SNAP: query_db
}

#[inline(never)]
fn send_reply() {
    snap!(); // SNAP: send_reply
}

#[inline(never)]
fn await_frame() {
    snap!(); // SNAP: await_frame
}

/// A request handler: three steps, in order.
#[inline(never)]
fn handle() {
    parse_request();
    query_db();
    send_reply();
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

fn park_forever() -> ! {
    loop {
        thread::park();
    }
}

fn create(path: &str, threads: u32, coroutines: u32) {
    let opts = RingOptions {
        thread_slots: threads,
        coroutine_slots: coroutines,
        depth: 32,
    };
    if let Err(e) = Ring::create(path, opts) {
        eprintln!("rip-dump-workload: {e}");
        std::process::exit(1);
    }
}

fn sites(path: &str) {
    create(path, 64, 64);
    librip::register_thread("main").expect("slot for main");
    let (tx, rx) = mpsc::channel::<String>();
    let spawn = |name: &'static str, f: fn()| {
        let tx = tx.clone();
        thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                librip::register_thread(name).expect("slot");
                f();
                tx.send(format!("role {name} {}", gettid())).unwrap();
                drop(tx);
                if name != "finished" {
                    park_forever();
                }
            })
            .unwrap();
    };
    // Three handlers that stop after the reply, one stuck in the database.
    spawn("handler-0", handle);
    spawn("handler-1", handle);
    spawn("handler-2", handle);
    spawn("db-stuck", || {
        parse_request();
        query_db();
    });
    // A thread that finishes: its slot is marked exited.
    spawn("finished", || {
        parse_request();
    });
    // Coroutines awaiting a frame.
    let cos: Vec<Coroutine> = (0..3)
        .map(|i| {
            let co = Coroutine::new(&format!("conn-{i}")).unwrap();
            let _in = co.enter();
            await_frame();
            drop(_in);
            co
        })
        .collect();
    drop(tx);
    let mut out = std::io::stdout().lock();
    writeln!(out, "role main {}", gettid()).unwrap();
    for line in rx.iter().take(5) {
        writeln!(out, "{line}").unwrap();
    }
    for co in &cos {
        writeln!(out, "task {}", co.id()).unwrap();
    }
    // Let "finished" finish exiting.
    thread::sleep(Duration::from_millis(50));
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    drop(out);
    let _keep = cos;
    park_forever();
}

fn many(path: &str, threads: usize, tasks: usize) {
    create(path, threads as u32 + 8, tasks as u32);
    librip::register_thread("main").expect("slot for main");
    let gate = Arc::new(Barrier::new(threads + 1));
    for i in 0..threads {
        let gate = gate.clone();
        thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                librip::register_thread(&format!("worker-{i}")).expect("slot");
                match i % 3 {
                    0 => handle(),
                    1 => query_db(),
                    _ => parse_request(),
                }
                gate.wait();
                park_forever();
            })
            .expect("spawn");
    }
    gate.wait();
    let cos: Vec<Coroutine> = (0..tasks)
        .map(|i| {
            let co = Coroutine::new(&format!("task-{i}")).expect("coroutine slot");
            let _in = co.enter();
            if i % 2 == 0 {
                await_frame();
            } else {
                send_reply();
            }
            drop(_in);
            co
        })
        .collect();
    println!("ready");
    let _keep = cos;
    park_forever();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["sites", path] => sites(path),
        ["many", path, threads, tasks] => many(
            path,
            threads.parse().expect("THREADS"),
            tasks.parse().expect("TASKS"),
        ),
        _ => {
            eprintln!("usage: rip-dump-workload sites RING | many RING THREADS TASKS");
            std::process::exit(2);
        }
    }
}
