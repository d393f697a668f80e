//! The cost of one snap, side by side: Rust `snap!()`, C `RIP_SNAP()`,
//! C `rip_snap()` (a call) and the original librip header's inline snap,
//! each in a loop of 1000 against an empty loop of the same shape.
//!
//! `cargo bench -p librip --bench snap` prints criterion's report, then a
//! table of per-snap medians (loop minus its empty baseline, / 1000) and
//! each one's ratio to the original's.

use std::{path::PathBuf, time::Duration};

use criterion::{BenchmarkId, Criterion, Throughput};

mod estimates;
mod loops;

use estimates::median;

const BATCH: u64 = 1000;

fn main() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = PathBuf::from(format!("/dev/shm/rip-bench.{}.ring", std::process::id()));
    let opts = librip::RingOptions {
        thread_slots: 64,
        coroutine_slots: 0,
        depth: 32,
    };
    let ring = librip::Ring::create(&path, opts).expect("create the bench ring");
    librip::register_thread("bench").expect("register the bench thread");
    // SAFETY: plain C setup; allocates the original-style ring.
    assert_eq!(unsafe { loops::rip_loop_original_setup(4096, 1234) }, 0);

    let mut c = Criterion::default()
        .output_directory(&dir.join("criterion"))
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let mut g = c.benchmark_group("snap");
    g.throughput(Throughput::Elements(BATCH));
    for (name, f) in loops::LOOPS {
        g.bench_with_input(BenchmarkId::from_parameter(name), &f, |b, f| {
            // SAFETY: the loops only snap (the ring and slot exist).
            b.iter(|| unsafe { f(BATCH) })
        });
    }
    g.finish();
    c.final_summary();

    summary(&dir.join("criterion/snap"));
    let _ = std::fs::remove_file(ring.path());
}

fn summary(dir: &std::path::Path) {
    let per_snap = |name: &str| -> Option<f64> {
        let base = if name.starts_with("rust") {
            "rust_empty"
        } else {
            "c_empty"
        };
        Some((median(dir, name)? - median(dir, base)?) / BATCH as f64)
    };
    let Some(original) = per_snap("original") else {
        eprintln!(
            "no criterion estimates under {} (filtered run?)",
            dir.display()
        );
        return;
    };
    println!(
        "\nper snap (criterion median of a {BATCH}-snap loop minus its empty loop, / {BATCH}):"
    );
    for (name, _) in loops::LOOPS.iter().filter(|(n, _)| !n.ends_with("empty")) {
        if let Some(ns) = per_snap(name) {
            println!(
                "  {name:<16} {ns:>7.3} ns   x{:.2} of original",
                ns / original
            );
        }
    }
    for base in ["rust_empty", "c_empty"] {
        if let Some(ns) = median(dir, base) {
            println!(
                "  {base:<16} {:>7.3} ns per loop iteration (baseline)",
                ns / BATCH as f64
            );
        }
    }
}
