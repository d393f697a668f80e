//! A librip program whose registered threads keep entering a function, for
//! the test of `--uprobe` beside a ring: `rip-ticker RING THREADS`. Each
//! thread registers, snaps once, then calls `tick()` every millisecond, so
//! a uprobe on `tick` fires all the time while its ring slot still names
//! the snap. Prints `worker <tid>` per thread, then `ready`, and runs until
//! killed.

use std::{hint::black_box, io::Write, sync::mpsc, thread, time::Duration};

use librip::{Ring, RingOptions, snap};

/// Entered every millisecond by every worker.
#[inline(never)]
#[unsafe(no_mangle)]
pub extern "C" fn rip_ticker_tick(n: u64) -> u64 {
    black_box(n.wrapping_add(1))
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(path), Some(threads)) = (
        args.first(),
        args.get(1).and_then(|n| n.parse::<u32>().ok()),
    ) else {
        eprintln!("usage: rip-ticker RING THREADS");
        std::process::exit(2);
    };
    let opts = RingOptions {
        thread_slots: threads + 4,
        coroutine_slots: 0,
        depth: 8,
    };
    if let Err(e) = Ring::create(path, opts) {
        eprintln!("rip-ticker: {e}");
        std::process::exit(1);
    }
    let (tx, rx) = mpsc::channel::<u32>();
    for i in 0..threads {
        let tx = tx.clone();
        thread::spawn(move || {
            librip::register_thread(&format!("ticker-{i}")).expect("slot");
            snap!(); // SNAP: ticker
            tx.send(gettid()).unwrap();
            drop(tx);
            let mut n = 0;
            loop {
                n = rip_ticker_tick(n);
                thread::sleep(Duration::from_millis(1));
            }
        });
    }
    drop(tx);
    let mut out = std::io::stdout().lock();
    for tid in rx.iter().take(threads as usize) {
        writeln!(out, "worker {tid}").unwrap();
    }
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    drop(out);
    loop {
        thread::park();
    }
}
