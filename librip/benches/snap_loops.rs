//! Runs one snap loop: `snap_loops LOOP N [RING]`, LOOP one of
//! `rust_empty c_empty rust_snap c_inline c_inline_static c_rip_snap c_call original`.
//!
//! The instruction-count test runs it under callgrind, collecting only
//! inside the loop's function. The ring is made at RING and kept, or made
//! in /dev/shm and removed.

use std::path::PathBuf;

#[path = "loops.rs"]
mod loops;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(name), Some(n)) = (args.get(1), args.get(2).and_then(|n| n.parse::<u64>().ok()))
    else {
        eprintln!("usage: snap_loops LOOP N [RING]");
        std::process::exit(2);
    };
    let Some(&(_, f)) = loops::LOOPS.iter().find(|(l, _)| l == name) else {
        eprintln!("snap_loops: no loop {name}");
        std::process::exit(2);
    };
    let keep = args.get(3).map(PathBuf::from);
    let path = keep.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "/dev/shm/rip-snap-loops.{}.ring",
            std::process::id()
        ))
    });
    let opts = librip::RingOptions {
        thread_slots: 4,
        coroutine_slots: 0,
        depth: 32,
    };
    let ring = librip::Ring::create(&path, opts).unwrap_or_else(|e| {
        eprintln!("snap_loops: {e}");
        std::process::exit(1)
    });
    librip::register_thread("loops").unwrap();
    // SAFETY: plain C setup of the original-style ring.
    assert_eq!(unsafe { loops::rip_loop_original_setup(64, 7) }, 0);
    // SAFETY: the loop only snaps; the ring and this thread's slot exist.
    unsafe { f(n) };
    if keep.is_none() {
        let _ = std::fs::remove_file(ring.path());
    }
}
