//! The cost of tracing async tasks (`librip::tokio`), with criterion:
//!
//! - per poll: a future polled in a `Traced` against the same future bare;
//! - per snap: a loop of snaps inside a task's poll against the same loop
//!   on the thread's own slot (each minus its loop without snaps);
//! - per snap in a cold slot: many tasks polled in turn, each poll snapping
//!   once, against the same polls without the snap.
//!
//! `cargo bench -p librip --features tokio --bench tasks` prints
//! criterion's report, then the figures.

use std::{path::PathBuf, time::Duration};

use criterion::{Criterion, Throughput};

mod estimates;
mod task_loops;

use estimates::median;
use task_loops::*;

/// Polls (or snaps) per measured iteration of the one-future loops.
const BATCH: u64 = 1000;
/// Tasks polled in turn by the rotating loops.
const MANY: usize = 10_000;

fn main() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = PathBuf::from(format!(
        "/dev/shm/rip-bench-tasks.{}.ring",
        std::process::id()
    ));
    let opts = librip::RingOptions {
        thread_slots: 8,
        coroutine_slots: 2 * MANY as u32 + 8,
        depth: 32,
    };
    let ring = librip::Ring::create(&path, opts).expect("create the bench ring");
    librip::register_thread("bench").expect("register the bench thread");
    let mut f = Futures::new(BATCH, MANY);

    let mut c = Criterion::default()
        .output_directory(&dir.join("criterion"))
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let mut g = c.benchmark_group("tasks");
    g.throughput(Throughput::Elements(BATCH));
    g.bench_function("poll_bare", |b| {
        b.iter(|| rip_task_poll_bare(&mut f, BATCH))
    });
    g.bench_function("poll_traced", |b| {
        b.iter(|| rip_task_poll_traced(&mut f, BATCH))
    });
    g.bench_function("thread_empty", |b| b.iter(|| rip_task_thread_empty(BATCH)));
    g.bench_function("thread_snap", |b| b.iter(|| rip_task_thread_snap(BATCH)));
    g.bench_function("task_empty", |b| b.iter(|| rip_task_task_empty(&mut f)));
    g.bench_function("task_snap", |b| b.iter(|| rip_task_task_snap(&mut f)));
    g.throughput(Throughput::Elements(f.many() as u64));
    g.bench_function("many_idle", |b| b.iter(|| rip_task_many_idle(&mut f)));
    g.bench_function("many_snap", |b| b.iter(|| rip_task_many_snap(&mut f)));
    g.finish();
    c.final_summary();

    summary(&dir.join("criterion/tasks"), f.many());
    let _ = std::fs::remove_file(ring.path());
}

fn summary(dir: &std::path::Path, many: usize) {
    let per = |a: &str, b: &str, n: f64| Some((median(dir, a)? - median(dir, b)?) / n);
    let batch = BATCH as f64;
    let (Some(poll), Some(thread), Some(task), Some(cold)) = (
        per("poll_traced", "poll_bare", batch),
        per("thread_snap", "thread_empty", batch),
        per("task_snap", "task_empty", batch),
        per("many_snap", "many_idle", many as f64),
    ) else {
        eprintln!(
            "no criterion estimates under {} (filtered run?)",
            dir.display()
        );
        return;
    };
    let bare = median(dir, "poll_bare").unwrap_or(0.0) / batch;
    let traced_cold = median(dir, "many_idle").unwrap_or(0.0) / many as f64;
    println!("\nper poll and per snap (criterion medians):");
    println!("  Traced wrapper        {poll:>7.2} ns per poll (bare poll {bare:.2} ns)");
    println!("  snap on a thread      {thread:>7.2} ns");
    println!(
        "  snap inside a task    {task:>7.2} ns   x{:.2} of a thread snap",
        task / thread
    );
    println!(
        "  snap in a cold task   {cold:>7.2} ns   x{:.2} ({many} tasks in turn, {traced_cold:.1} ns per traced poll without it)",
        cold / thread
    );
}
