//! Reading a ring with 100,000 live slots fits well inside the dump
//! tool's budget: the reader copies only the used prefix of each region.
//! The budget is CPU time, which a busy machine does not lengthen; the
//! wall-clock figure is `cargo xtask bench`'s (dump's `read ring` phase).

use std::time::Instant;

use librip::{Ring, RingOptions, coroutine::Coroutine, reader::RingFile, snap};
use rip_tests::{TempDir, thread_cpu_time};

const SLOTS: usize = 100_000;

#[test]
fn reads_100k_live_slots_quickly() {
    let dir = TempDir::new("/dev/shm", "speed");
    let path = dir.join("speed.ring");
    let opts = RingOptions {
        thread_slots: 0,
        coroutine_slots: SLOTS as u32,
        depth: 32,
    };
    let ring = Ring::create(&path, opts).unwrap();
    ring.register_thread("main").unwrap();
    let t = Instant::now();
    let cos: Vec<_> = (0..SLOTS)
        .map(|i| {
            let co = Coroutine::new(&format!("task-{i}")).unwrap();
            let _in = co.enter();
            for _ in 0..(i % 40) {
                snap!();
            }
            drop(_in);
            co
        })
        .collect();
    eprintln!(
        "{SLOTS} coroutines registered and snapped in {:.0} ms",
        t.elapsed().as_secs_f64() * 1e3
    );

    // The best of a few reads, in this thread's CPU time: the figure is
    // the reader's, not the scheduler's.
    let mut best = f64::MAX;
    let mut n = 0;
    let mut entries = 0;
    for _ in 0..5 {
        let t = thread_cpu_time();
        let r = RingFile::open(&path).unwrap();
        let slots: Vec<_> = r.slots().collect();
        best = best.min((thread_cpu_time() - t).as_secs_f64() * 1e3);
        n = slots.len();
        entries = slots.iter().map(|s| s.entries.len()).sum::<usize>();
        assert_eq!(
            r.header().thread_slots,
            std::fs::read_to_string("/proc/sys/kernel/pid_max")
                .unwrap()
                .trim()
                .parse::<u32>()
                .unwrap()
        );
    }
    assert_eq!(n, SLOTS + 1);
    assert_eq!(entries, (0..SLOTS).map(|i| (i % 40).min(32)).sum::<usize>());
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    eprintln!("read {n} live slots ({entries} entries) in {best:.1} ms of CPU ({profile} build)");
    // The budget is for optimized builds; unoptimized ones get 5x.
    let budget = if cfg!(debug_assertions) { 500.0 } else { 100.0 };
    assert!(best < budget, "{best:.1} ms to read {n} slots");
    drop(cos);
}
