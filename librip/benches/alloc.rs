//! The allocation sampler's cost to malloc + free: 1,000 pairs of a
//! 64-byte block through the C library's allocator (`System`), and through
//! `librip::alloc::Sampled` with the ring's allocation table at the
//! default mean (512 KiB) and recording every allocation.
//!
//! `cargo bench -p librip --bench alloc`

use std::{
    alloc::{GlobalAlloc, Layout, System},
    hint::black_box,
    path::PathBuf,
    time::Duration,
};

use criterion::{Criterion, Throughput};
use librip::alloc::Sampled;

const BATCH: u64 = 1000;

static SAMPLED: Sampled<System> = Sampled::new(System);

fn pairs(a: &dyn GlobalAlloc, layout: Layout) {
    for _ in 0..BATCH {
        // SAFETY: a non-zero layout, freed with the same one.
        unsafe {
            let p = a.alloc(black_box(layout));
            assert!(!p.is_null());
            p.write(1);
            a.dealloc(black_box(p), layout);
        }
    }
}

fn main() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = PathBuf::from(format!(
        "/dev/shm/rip-bench-alloc.{}.ring",
        std::process::id()
    ));
    librip::alloc::sample_allocations(librip::format::alloc::DEFAULT_MEAN);
    let opts = librip::RingOptions {
        thread_slots: 64,
        coroutine_slots: 0,
        depth: 32,
    };
    librip::Ring::create(&path, opts).expect("create the bench ring");
    let layout = Layout::from_size_align(64, 8).unwrap();

    let mut c = Criterion::default()
        .output_directory(&dir.join("criterion"))
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let mut g = c.benchmark_group("malloc+free");
    g.throughput(Throughput::Elements(BATCH));
    g.bench_function("system", |b| b.iter(|| pairs(&System, layout)));
    librip::__private::bench_mean(librip::format::alloc::DEFAULT_MEAN);
    g.bench_function("sampled 512 KiB", |b| b.iter(|| pairs(&SAMPLED, layout)));
    librip::__private::bench_mean(1);
    g.bench_function("sampled every call", |b| b.iter(|| pairs(&SAMPLED, layout)));
    g.finish();
    c.final_summary();
    let _ = std::fs::remove_file(&path);
}
