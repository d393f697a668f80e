//! The cost of tracing async tasks, counted under callgrind (timings are
//! in `cargo bench -p librip --features tokio --bench tasks`):
//!
//! - a `Traced` poll against the same future polled bare: the wrapper's
//!   instructions per poll, within a budget (the two coarse clock reads
//!   are most of it);
//! - a snap inside a task's poll, hot or in a slot the cache has not seen
//!   lately, against a snap on the thread's own slot: the same ten
//!   instructions, well inside the "at most twice a thread snap" budget.

use rip_tests::{build_task_loops, callgrind_instructions};

/// Polls, and snaps per loop.
const N: u64 = 10_000;
/// Instructions the wrapper may add to a poll: cursor switch and restore,
/// four statistics stores, two reads of the coarse clock (vDSO).
const POLL_BUDGET: f64 = 90.0;

#[test]
fn a_traced_poll_and_a_snap_in_a_task_are_within_budget() {
    let bin = build_task_loops();
    let count = |name: &str| -> f64 {
        callgrind_instructions(&bin, &format!("rip_task_{name}"), &[name, &N.to_string()]) as f64
    };
    let per = |loop_: &str, base: &str| (count(loop_) - count(base)) / N as f64;
    let poll = per("poll_traced", "poll_bare");
    let thread = per("thread_snap", "thread_empty");
    let task = per("task_snap", "task_empty");
    let cold = per("many_snap", "many_idle");
    eprintln!("instructions (callgrind, {N} polls or snaps, minus the same loop without):");
    eprintln!("  Traced wrapper, per poll    {poll:.2}");
    eprintln!("  snap on a thread's slot     {thread:.2}");
    eprintln!("  snap inside a task's poll   {task:.2}");
    eprintln!("  snap in {N} tasks in turn  {cold:.2}");
    assert!(poll > 0.0 && poll <= POLL_BUDGET, "{poll} per poll");
    assert!(thread >= 9.0, "a snap is counted: {thread}");
    assert!(task <= 2.0 * thread, "task {task} vs thread {thread}");
    assert!(cold <= 2.0 * thread, "cold task {cold} vs thread {thread}");
}
