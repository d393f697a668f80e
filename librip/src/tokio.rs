//! Async tasks with a slot of their own (cargo feature `tokio`).
//!
//! [`Traced`] wraps a future in a coroutine: each poll points the polling
//! thread's snaps at the task's slot and back, and records the task
//! statistics (polls, when the last poll started and ended, the thread
//! polling it now). A `snap!()` in the task's body therefore lands in the
//! task's slot on whichever thread the runtime polls it, and rip-probe
//! lists the task by name, idle or polling, with where it awaits. The slot
//! is freed for another task as soon as the future completes or is dropped.
//!
//! ```no_run
//! use librip::tokio::{TracedExt, spawn_traced};
//! # async fn read_frame() {}
//! # async fn demo() {
//! spawn_traced("conn", async {
//!     librip::snap!(); // lands in the task's slot: rip-probe shows this line
//!     read_frame().await;
//! });
//! let answer = async { 42 }.traced("answer").await;
//! # }
//! ```
//!
//! Without a ring, the futures run untraced: their snaps go wherever the
//! polling thread's go. So do they when every coroutine slot is taken,
//! which is reported once on stderr.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use pin_project_lite::pin_project;

use crate::{Error, Ring, coroutine::Coroutine, format::task_flags};

pin_project! {
    /// A future in a coroutine slot of its own (see the [module](self)).
    #[must_use = "futures do nothing unless polled"]
    #[derive(Debug)]
    pub struct Traced<F> {
        #[pin]
        inner: F,
        // None: untraced (no ring, no free slot), or completed.
        task: Option<Coroutine>,
    }
}

impl<F> Traced<F> {
    /// Wraps `inner` in a task named `name` (32 bytes are kept), taking its
    /// slot now: the task exists, idle, from its creation.
    pub fn new(name: &str, inner: F) -> Traced<F> {
        let task = Ring::get().ok_or(Error::NoRing).and_then(|ring| {
            Coroutine::begin(ring, 0, name.as_bytes(), 0, None, task_flags::TOKIO)
        });
        let task = match task {
            Ok(co) => Some(co),
            Err(Error::NoRing) => None,
            Err(e) => {
                crate::capi::report_once("cannot trace a task", &e);
                None
            }
        };
        Traced { inner, task }
    }

    /// The task's coroutine, while it has one (not after completion, nor
    /// when untraced).
    pub fn coroutine(&self) -> Option<&Coroutine> {
        self.task.as_ref()
    }

    /// The task's id (its coroutine id), while it has one.
    pub fn id(&self) -> Option<u64> {
        self.task.as_ref().map(Coroutine::id)
    }
}

impl<F: Future> Future for Traced<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let Some(task) = this.task.as_ref() else {
            return this.inner.poll(cx);
        };
        let out = {
            // The guard ends the poll and restores the thread's cursor when
            // it drops, also when the inner poll unwinds.
            let _polling = task.poll();
            this.inner.poll(cx)
        };
        if out.is_ready() {
            // Free the slot now rather than when the runtime gets round to
            // dropping the future.
            *this.task = None;
        }
        out
    }
}

/// `.traced(name)` for every future.
pub trait TracedExt: Future + Sized {
    /// This future in a task named `name` with a slot of its own.
    fn traced(self, name: &str) -> Traced<Self> {
        Traced::new(name, self)
    }
}

impl<F: Future> TracedExt for F {}

/// `tokio::spawn(fut.traced(name))`: spawns `fut` on the current tokio
/// runtime as a task named `name`. Panics outside a runtime, as
/// `tokio::spawn` does.
pub fn spawn_traced<F>(name: &str, fut: F) -> ::tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    ::tokio::spawn(fut.traced(name))
}
