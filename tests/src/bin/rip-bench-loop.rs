//! The benchmark loop of `tests/bench/loop.c` in Rust: a noinline `f()`
//! called N times, recording that it ran with `librip::snap!()`.
//!
//! Usage: `rip-bench-loop N [--wait]`. It speaks the protocol of
//! `tests/bench/bench.h`: with `--wait` it prints `ready` and waits for a
//! line on stdin, then prints `calls N elapsed_ns T nivcsw K` for the loop
//! alone (K: involuntary context switches meanwhile).

use std::{
    hint::black_box,
    io::{BufRead, Write},
    sync::atomic::{AtomicU64, Ordering},
    time::Instant,
};

/// How many times `f` ran.
static COUNT: AtomicU64 = AtomicU64::new(0);

/// The traced function: a snap, and the talk's `count++` (a plain load and
/// store, as in C).
#[inline(never)]
#[unsafe(no_mangle)]
pub extern "C" fn f() {
    librip::snap!();
    COUNT.store(COUNT.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// The measured loop (callgrind counts instructions inside it).
#[inline(never)]
#[unsafe(no_mangle)]
pub extern "C" fn run_loop(n: u64) {
    for _ in 0..black_box(n) {
        f();
    }
}

/// Involuntary context switches of this process so far.
fn involuntary_switches() -> i64 {
    // SAFETY: all-zero is a valid rusage; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_nivcsw
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = match args.next().map(|a| a.parse()) {
        Some(Ok(n)) => n,
        _ => {
            eprintln!("usage: rip-bench-loop N [--wait]");
            std::process::exit(2);
        }
    };
    let wait = args.next().as_deref() == Some("--wait");
    let ring = format!("/dev/shm/rip-bench-loop-rust.{}.ring", std::process::id());
    let opts = librip::RingOptions {
        thread_slots: 4,
        coroutine_slots: 0,
        ..librip::RingOptions::default()
    };
    if let Err(e) = librip::Ring::create(&ring, opts).and_then(|_| librip::register_thread("loop"))
    {
        eprintln!("rip-bench-loop: {e}");
        std::process::exit(1);
    }
    let mut out = std::io::stdout().lock();
    if wait {
        writeln!(out, "ready")
            .and_then(|_| out.flush())
            .expect("stdout");
        let _ = std::io::stdin().lock().read_line(&mut String::new());
    }
    let switches = involuntary_switches();
    let t = Instant::now();
    run_loop(n);
    let elapsed = t.elapsed().as_nanos();
    let switches = involuntary_switches() - switches;
    let calls = COUNT.load(Ordering::Relaxed);
    writeln!(out, "calls {calls} elapsed_ns {elapsed} nivcsw {switches}").expect("stdout");
    let _ = std::fs::remove_file(&ring);
    std::process::exit(if calls == n { 0 } else { 1 });
}
