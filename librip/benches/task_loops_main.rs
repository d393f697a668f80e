//! Runs one task loop: `task_loops LOOP N`, LOOP one of `poll_bare
//! poll_traced thread_snap thread_empty task_snap task_empty many_snap
//! many_idle`. N is the polls of the poll loops, the snaps of the snap
//! loops' one poll, and the tasks of the `many` loops (each polled once).
//!
//! The instruction-count test runs it under callgrind, collecting only
//! inside `rip_task_<LOOP>`.

#[path = "task_loops.rs"]
mod task_loops;

use task_loops::*;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(name), Some(n)) = (args.get(1), args.get(2).and_then(|n| n.parse::<u64>().ok()))
    else {
        eprintln!("usage: task_loops LOOP N");
        std::process::exit(2);
    };
    let path = format!("/dev/shm/rip-task-loops.{}.ring", std::process::id());
    let opts = librip::RingOptions {
        thread_slots: 4,
        coroutine_slots: 2 * n as u32 + 8,
        depth: 32,
    };
    let ring = librip::Ring::create(&path, opts).unwrap_or_else(|e| {
        eprintln!("task_loops: {e}");
        std::process::exit(1)
    });
    librip::register_thread("loops").unwrap();
    let mut f = Futures::new(n, n as usize);
    match name.as_str() {
        "poll_bare" => rip_task_poll_bare(&mut f, n),
        "poll_traced" => rip_task_poll_traced(&mut f, n),
        "thread_snap" => rip_task_thread_snap(n),
        "thread_empty" => rip_task_thread_empty(n),
        "task_snap" => rip_task_task_snap(&mut f),
        "task_empty" => rip_task_task_empty(&mut f),
        "many_snap" => rip_task_many_snap(&mut f),
        "many_idle" => rip_task_many_idle(&mut f),
        _ => {
            eprintln!("task_loops: no loop {name}");
            std::process::exit(2);
        }
    }
    let _ = std::fs::remove_file(ring.path());
}
