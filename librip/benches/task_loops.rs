//! Loops of polls and snaps for the cost of tracing async tasks: the same
//! futures polled bare and in [`Traced`], and snaps on a thread's slot and
//! inside a task's poll. Measured by `benches/tasks.rs` and counted under
//! callgrind by the instruction-count test (through `benches/task_loops_main.rs`).
//!
//! Each loop is a named, never-inlined function so that callgrind can
//! collect inside it alone.

use std::{
    future::Future,
    hint::black_box,
    pin::Pin,
    task::{Context, Poll, Waker},
};

use librip::{
    snap,
    tokio::{Traced, TracedExt},
};

/// Keeps `i` in a register so the loops keep their shape (as in loops.rs).
macro_rules! keep {
    ($i:expr) => {
        // SAFETY: an empty asm that only reads a register.
        unsafe { core::arch::asm!("/* {0} */", in(reg) $i, options(nomem, nostack, preserves_flags)) }
    };
}

/// A future that never completes: each poll runs a loop of `n` snaps and
/// returns `Pending`.
pub struct Snaps {
    n: u64,
}

impl Future for Snaps {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        for i in 0..black_box(self.n) {
            snap!();
            keep!(i);
        }
        Poll::Pending
    }
}

/// [`Snaps`] without the snap: the loop alone.
pub struct Loop {
    n: u64,
}

impl Future for Loop {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        for i in 0..black_box(self.n) {
            keep!(i);
        }
        Poll::Pending
    }
}

/// A future that never completes, with a poll that does nothing but keep
/// its counter (the bare future of the per-poll comparison).
pub struct Idle {
    polls: u64,
}

impl Future for Idle {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        self.polls = black_box(self.polls + 1);
        Poll::Pending
    }
}

/// The futures the loops poll. Made once (taking coroutine slots), then
/// polled as often as the benchmark wants.
pub struct Futures {
    bare: Pin<Box<Idle>>,
    traced: Pin<Box<Traced<Idle>>>,
    /// One poll: a loop of `batch` iterations, with or without a snap.
    task_empty: Pin<Box<Traced<Loop>>>,
    task_snaps: Pin<Box<Traced<Snaps>>>,
    /// Many tasks polled in turn: each poll snaps once, or not.
    many_snap: Vec<Pin<Box<Traced<Snaps>>>>,
    many_idle: Vec<Pin<Box<Traced<Loop>>>>,
}

impl Futures {
    /// The futures; `batch` snaps per poll in the one-task loops, `many`
    /// tasks in the rotating loops. Needs a ring with `2 * many + 3` free
    /// coroutine slots.
    pub fn new(batch: u64, many: usize) -> Futures {
        let snaps = |name: &str, n: u64| Box::pin(Snaps { n }.traced(name));
        let empty = |name: &str, n: u64| Box::pin(Loop { n }.traced(name));
        let f = Futures {
            bare: Box::pin(Idle { polls: 0 }),
            traced: Box::pin(Idle { polls: 0 }.traced("traced")),
            task_empty: empty("task-empty", batch),
            task_snaps: snaps("task-snaps", batch),
            many_snap: (0..many).map(|_| snaps("many-snap", 1)).collect(),
            many_idle: (0..many).map(|_| empty("many-idle", 1)).collect(),
        };
        assert!(
            f.traced.coroutine().is_some() && f.many_idle.iter().all(|t| t.id().is_some()),
            "every traced future has a slot (is the ring big enough?)"
        );
        f
    }

    /// Tasks in the rotating loops.
    #[allow(dead_code)] // the bench reports it; the example knows it
    pub fn many(&self) -> usize {
        self.many_idle.len()
    }
}

fn cx() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

/// `n` polls of the bare future.
#[inline(never)]
#[unsafe(no_mangle)]
pub fn rip_task_poll_bare(f: &mut Futures, n: u64) {
    let mut cx = cx();
    for _ in 0..n {
        let _ = f.bare.as_mut().poll(&mut cx);
    }
}

/// `n` polls of the same future in a [`Traced`].
#[inline(never)]
#[unsafe(no_mangle)]
pub fn rip_task_poll_traced(f: &mut Futures, n: u64) {
    let mut cx = cx();
    for _ in 0..n {
        let _ = f.traced.as_mut().poll(&mut cx);
    }
}

/// `n` snaps on the thread's own slot.
#[inline(never)]
#[unsafe(no_mangle)]
pub fn rip_task_thread_snap(n: u64) {
    for i in 0..n {
        snap!();
        keep!(i);
    }
}

/// The thread loop's baseline: the loop alone.
#[inline(never)]
#[unsafe(no_mangle)]
pub fn rip_task_thread_empty(n: u64) {
    for i in 0..n {
        keep!(i);
    }
}

/// One poll of a task whose body is a loop of `batch` snaps.
#[inline(never)]
#[unsafe(no_mangle)]
pub fn rip_task_task_snap(f: &mut Futures) {
    let _ = f.task_snaps.as_mut().poll(&mut cx());
}

/// The task loop's baseline: one poll of a task whose body is the same
/// loop without the snap.
#[inline(never)]
#[unsafe(no_mangle)]
pub fn rip_task_task_empty(f: &mut Futures) {
    let _ = f.task_empty.as_mut().poll(&mut cx());
}

/// One poll of each of the many tasks, each snapping once: every snap goes
/// to a slot the cache has not seen lately.
#[inline(never)]
#[unsafe(no_mangle)]
pub fn rip_task_many_snap(f: &mut Futures) {
    let mut cx = cx();
    for t in &mut f.many_snap {
        let _ = t.as_mut().poll(&mut cx);
    }
}

/// The same polls, each running the loop without the snap.
#[inline(never)]
#[unsafe(no_mangle)]
pub fn rip_task_many_idle(f: &mut Futures) {
    let mut cx = cx();
    for t in &mut f.many_idle {
        let _ = t.as_mut().poll(&mut cx);
    }
}
